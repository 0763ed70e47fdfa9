package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
)

// A load that fails stops the host with an *Error that names the host,
// the image and what the runtime said, whatever the other hosts do; the
// orphans listed before it (none here) come first. Real podman, run
// locally, with a storage of its own.
func TestPrepareNamesHostAndImage(t *testing.T) {
	testenv.LookPath(t, "podman")
	dir := t.TempDir()
	// The runtime's storage and configuration under dir: nothing of the
	// machine's own podman is read or changed.
	conf := filepath.Join(dir, "storage.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[storage]\ndriver = \"vfs\"\ngraphroot = \""+filepath.Join(dir, "root")+"\"\nrunroot = \""+filepath.Join(dir, "run")+"\"\n"), 0o644))
	t.Setenv("CONTAINERS_STORAGE_CONF", conf)
	tr, err := cluster.NewLocal(cluster.Endpoint{Name: "h7"})
	require.NoError(t, err)
	missing := filepath.Join(dir, "no-such-img.tar")
	c := config.Container{Image: config.ArchivePrefix + missing, Runtime: config.RuntimePodman}
	errs := Prepare(context.Background(), c, []Host{{Name: "h7", T: tr, Workdir: dir, Image: true}}, nil)
	require.Len(t, errs, 1)
	var e *Error
	require.True(t, errors.As(errs[0], &e), "%v", errs[0])
	assert.Equal(t, "h7", e.Host)
	assert.Equal(t, c.Image, e.Image)
	assert.Equal(t, "load", e.Doing)
	assert.Contains(t, e.Error(), "container on h7: load of image docker-archive:"+missing)
	assert.Contains(t, e.Output, "no-such-img.tar", "the runtime's own words")

	// Without the image due, only the (empty) orphan listing runs.
	errs = Prepare(context.Background(), c, []Host{{Name: "h7", T: tr, Workdir: dir}}, nil)
	assert.NoError(t, errs[0])
}
