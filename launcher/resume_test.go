package launcher

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/checkpoint"
)

// TestResumedFrom: the first attempt's resume event names the checkpoint
// and the earlier run (its log directory beside this run's) that saw it
// complete: the newest that started before it was seen, of the same job
// (a job whose name extends this one's is another job), or says that no
// earlier run recorded it when this run found it.
func TestResumedFrom(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"mnist-20240101-100000", "mnist-20240101-110000", "mnist-20240101-110000-2", "mnist-big-20240101-113000", "mnist-20240101-120000"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	runDir := filepath.Join(root, "mnist-20240101-120000")
	at := func(hm string) time.Time {
		v, err := time.ParseInLocation("20060102-1504", "20240101-"+hm, time.Local)
		require.NoError(t, err)
		return v
	}
	paths := map[string]string{"a": "/w/checkpoints/step-20", "b": "/w/.drover/checkpoints/000002/step-20"}
	for _, tc := range []struct {
		name string
		seen time.Time
		held []checkpoint.Location
		want string
	}{
		{"earlier run", at("1045"), []checkpoint.Location{{Kind: checkpoint.Written, Host: "a", Path: "/w/checkpoints/step-20"}},
			"checkpoint step-20 from run mnist-20240101-100000"},
		{"same second, second dir", at("1145"), []checkpoint.Location{{Kind: checkpoint.Copy, Host: "b", Path: "/w/.drover/checkpoints/000002/step-20"}},
			"checkpoint step-20 from run mnist-20240101-110000-2"},
		{"found by this run", at("1201"), []checkpoint.Location{{Kind: checkpoint.Written, Host: "a", Path: "/w/checkpoints/step-20"}},
			"checkpoint step-20, found in checkpoint_dir (no earlier run of drover recorded it)"},
		{"not staged", at("1045"), []checkpoint.Location{{Kind: checkpoint.Written, Host: "a", Path: "/elsewhere"}},
			"a checkpoint of an earlier run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries := []checkpoint.Entry{{Seq: 2, Name: "step-20", Seen: tc.seen, Held: tc.held}}
			assert.Equal(t, tc.want, resumedFrom(entries, paths, runDir))
		})
	}
}
