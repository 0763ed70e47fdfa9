package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartOver: a run started over resumes from nothing that existed
// before it, though the hosts' checkpoint_dir still holds the old
// checkpoint (left as it is) and drover's copies of it are set aside
// under .drover/set-aside/<tag>, with the record copied beside itself:
// nothing is deleted. A checkpoint the new run writes, under the old
// name too, is resumed from at its restart, and a later run without
// StartOver resumes from it, the newest in the record.
func TestStartOver(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, ev, recPath := newManager(t)
	set := Settings{Copies: 2, Keep: 2}
	hosts := hostsOf(hs...)
	old := hs[0].write(t, "step-10.pt", 1000, time.Now().Add(-time.Hour))
	watchOnce(t, m, hosts, set)
	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	require.NotNil(t, paths, "before starting over, the old checkpoint is resumed from")
	oldCopy := paths["h1"]
	require.Equal(t, hs[1].copyPath(1, "step-10.pt"), oldCopy)
	userBefore := tree(t, hs[0].Dir)

	since, err := StartOver(context.Background(), m, hosts, set, "run-2")
	require.NoError(t, err)
	t.Log(ev)
	paths, err = m.Stage(context.Background(), hosts, Settings{Copies: 2, Keep: 2, Since: since})
	require.NoError(t, err)
	assert.Nil(t, paths, "a run started over resumes from nothing")
	assert.Equal(t, userBefore, tree(t, hs[0].Dir), "checkpoint_dir is left as it is")
	fileEq(t, old, filepath.Join(SetAsideDir(hs[1].Own, "run-2"), "000001", "step-10.pt"))
	_, err = os.Stat(hs[1].Own)
	assert.ErrorIs(t, err, os.ErrNotExist, "drover's copies were moved, not left to be pruned")
	assert.FileExists(t, SetAsideRecordPath(recPath, "run-2"))

	// The new run saves step-10.pt again, and its restart resumes from it.
	again := hs[0].write(t, "step-10.pt", 1200, time.Now())
	watchOnce(t, m, hosts, set)
	paths, err = m.Stage(context.Background(), hosts, Settings{Copies: 2, Keep: 2, Since: since})
	require.NoError(t, err)
	require.NotNil(t, paths)
	fileEq(t, again, paths["h1"])
	// A later run, not started over, resumes from the new run's too.
	paths, err = m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	fileEq(t, again, paths["h1"])
}
