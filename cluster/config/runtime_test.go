package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runtimeErrorCases are values that used to load and then fail once a
// run was under way (issue 21 item 10); each is one configuration error
// with its line.
var runtimeErrorCases = []errorCase{
	{name: "job name too long for a file name", job: joinParts(jobHead[:1], lns(`name = "`+strings.Repeat("n", MaxJobName+1)+`"`), jobHead[2:], hostA),
		line: 2, key: "job.name", msg: "201 bytes long; at most 200", fix: `name = "nnnn`},
	{name: "NUL byte in an argument", job: joinParts(jobHead[:3], lns(`command = ["python3", "t.py", "--tag=a\u0000b"]`), hostA),
		line: 4, key: "job.command", msg: "element 3 contains a NUL byte", fix: `remove the \u0000`},
	{name: "NUL byte in the program", job: joinParts(jobHead[:3], lns(`command = ["python3\u0000"]`), hostA),
		line: 4, key: "job.command", msg: "element 1 contains a NUL byte", fix: `remove the \u0000`},
	{name: "checkpoint_dir is the workdir", job: joinParts(jobHead, lns(`checkpoint_dir = "."`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: `checkpoint_dir "." is the workdir itself`, fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_dir is the workdir, spelled long", job: joinParts(jobHead, lns(`checkpoint_dir = "ckpt/.."`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: "is the workdir itself", fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_dir above the workdir", job: joinParts(jobHead, lns(`checkpoint_dir = ".."`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: `checkpoint_dir ".." is above the workdir`, fix: "absolute path of its own"},
	{name: "checkpoint_dir the home directory", job: joinParts(jobHead, lns(`checkpoint_dir = "../../"`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: "is above the workdir", fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_dir the root", job: joinParts(jobHead, lns(`checkpoint_dir = "/"`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: "the home directory or above it", fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_dir equals an absolute workdir", job: joinParts(jobHead, lns(`workdir = "/srv/run/j"`, `checkpoint_dir = "/srv/run/j/"`), hostA),
		line: 6, key: "job.checkpoint_dir", msg: "is the workdir itself", fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_dir above an absolute workdir", job: joinParts(jobHead, lns(`workdir = "/srv/run/j"`, `checkpoint_dir = "/srv"`), hostA),
		line: 6, key: "job.checkpoint_dir", msg: "is above the workdir /srv/run/j", fix: `checkpoint_dir = "checkpoints"`},
}

func TestLoadRuntimeErrors(t *testing.T) {
	for _, tc := range runtimeErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := filepath.Join(dir, "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(tc.job), 0o644))
			cfg, err := Load(job, LoadOptions{})
			assert.Nil(t, cfg)
			ces := configErrors(t, err)
			require.Len(t, ces, 1, "want exactly one error, got:\n%v", err)
			e := ces[0]
			assert.Equal(t, job, e.File)
			assert.Equal(t, tc.line, e.Line, "line of %v", e)
			assert.Equal(t, tc.key, e.Key, "key of %v", e)
			assert.Contains(t, e.Msg, tc.msg, "msg of %v", e)
			assert.Contains(t, e.Fix, tc.fix, "fix of %v", e)
		})
	}
}

// Checkpoint directories that are fine: inside the workdir, beside it,
// elsewhere.
func TestLoadCheckpointDirAccepted(t *testing.T) {
	for _, ckpt := range []string{"checkpoints", "./ckpt", "../shared-ckpt", "../../data/ckpt", "/mnt/ckpt", "/srv/run/j/ckpt"} {
		dir := t.TempDir()
		job := filepath.Join(dir, "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lns(`workdir = "/srv/run/j"`, `checkpoint_dir = "`+ckpt+`"`), hostA)), 0o644))
		_, err := Load(job, LoadOptions{})
		assert.NoError(t, err, ckpt)
	}
}

func TestCheckpointDirProblemWithHome(t *testing.T) {
	for _, tc := range []struct{ ckpt, home, workdir, want string }{
		{"/home/u", "/home/u", "drover/j", "the home directory or above it"},
		{"/home", "/home/u", "drover/j", "the home directory or above it"},
		{"/home/u/drover/j", "/home/u", "drover/j", "is the workdir itself"},
		{"/home/u/drover", "/home/u", "drover/j", "is above the workdir /home/u/drover/j"},
		{"/home/u/drover/j/.drover/checkpoints", "/home/u", "drover/j", "inside the workdir's .drover"},
		{"/home/u/drover/j/.droverx", "/home/u", "drover/j", ""},
		{"/home/u/ckpt", "/home/u", "drover/j", ""},
		{"/home/u2", "/home/u", "drover/j", ""},
		{"/home/u", "", "drover/j", ""}, // home not known yet: the plan checks again
	} {
		assert.Contains(t, CheckpointDirProblem(tc.ckpt, tc.home, tc.workdir), tc.want, "%+v", tc)
		if tc.want == "" {
			assert.Empty(t, CheckpointDirProblem(tc.ckpt, tc.home, tc.workdir), "%+v", tc)
		}
	}
}
