package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

// TestBuildCheckpointDirAtHome: an absolute checkpoint_dir that turns out
// to be a host's home, or its workdir, once the home is known is a
// configuration error of the plan (the loader cannot know the home).
func TestBuildCheckpointDirAtHome(t *testing.T) {
	for _, tc := range []struct{ ckpt, want string }{
		{"/home/u", `on a: checkpoint_dir "/home/u" is the home directory or above it`},
		{"/home/u/drover/demo", `on a: checkpoint_dir "/home/u/drover/demo" is the workdir itself`},
		{"/home/u/ckpt", ""},
	} {
		cfg := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0))
		cfg.Job.CheckpointDir = tc.ckpt
		_, err := Build(PlanInput{Config: cfg, HostHome: map[string]string{"a": "/home/u"}})
		if tc.want == "" {
			assert.NoError(t, err, tc.ckpt)
			continue
		}
		require.Error(t, err, tc.ckpt)
		assert.True(t, config.IsConfigError(err))
		assert.Contains(t, err.Error(), "/jobs/job.toml: job.checkpoint_dir: "+tc.want)
		// Without the home (drover plan without --probe) it cannot tell.
		_, err = Build(PlanInput{Config: cfg})
		assert.NoError(t, err, tc.ckpt)
	}
}
