package push

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestForJob is the one exclusion rule `drover push` and `drover run`
// share: before it, `drover push` sent runs/ and both sent checkpoints.
func TestForJob(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		code, workdir, ckpt, log string
		want                     []string
	}{
		{"example layout", "/src/job", "drover/job", "checkpoints", "", []string{"checkpoints", "runs"}},
		{"nested checkpoint dir", "/src/job", "w", "./out/ckpt/", "", []string{"out/ckpt", "runs"}},
		{"log dir given", "/src/job", "w", "ck", "/src/job/logs/drover", []string{"ck", "logs/drover"}},
		{"log dir outside the code", "/src/job", "w", "ck", "/var/log/drover", []string{"ck"}},
		{"job file outside the code", "/src/job/code", "w", "ck", "", []string{"ck"}},
		{"absolute checkpoint inside an absolute workdir", "/src/job", "/data/w", "/data/w/ck", "", []string{"ck", "runs"}},
		{"home-relative checkpoint inside the workdir", "/src/job", "drover/w", "~/drover/w/ck", "", []string{"ck", "runs"}},
		{"workdir ~", "/src/job", "~", "ck", "", []string{"ck", "runs"}},
		{"absolute checkpoint elsewhere", "/src/job", "drover/w", "/scratch/ck", "", []string{"runs"}},
		{"checkpoint dir is the workdir", "/src/job", "w", ".", "", []string{"runs"}},
		{"checkpoint dir above the workdir", "/src/job", "w", "../ck", "", []string{"runs"}},
		{"no checkpoint dir", "/src/job", "w", "", "", []string{"runs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := ForJob(Job{File: "/src/job/job.toml",
				Code: tc.code, Workdir: tc.workdir, CheckpointDir: tc.ckpt, Exclude: []string{"*.pt"},
			}, tc.log)
			assert.Equal(t, tc.want, opts.Protect)
			assert.Equal(t, []string{"*.pt"}, opts.Exclude)
		})
	}
}

// TestForJobProtectsDataDests: a [[data]] set staged into the workdir is
// the fleet's data, so a push that finds the same path in the code never
// replaces or deletes it; a dest outside the workdir is not the push's.
func TestForJobProtectsDataDests(t *testing.T) {
	opts := ForJob(Job{File: "/elsewhere/job.toml", Code: "/src/job", Workdir: "/data/w", CheckpointDir: "ck",
		DataDests: []string{"data/imagenet", "/data/w/shards", "/scratch/big"}}, "")
	assert.Equal(t, []string{"ck", "data/imagenet", "shards"}, opts.Protect)
}
