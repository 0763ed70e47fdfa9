package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

// TestPlanRuntimeConfigErrors: configuration that used to fail only once
// a run was under way (issue 21 item 10) is a configuration error of
// drover plan (and so of drover run, which loads and plans the same way):
// exit 2, file:line: key.
func TestPlanRuntimeConfigErrors(t *testing.T) {
	head := "[job]\nname = \"tf\"\nframework = \"tensorflow\"\ncommand = [\"python3\", \"t.py\"]\nprocs_per_host = 3\n"
	host := "\n[[host]]\nname = \"c\"\naddress = \"10.0.0.3\"\ngpus = []\n"
	for _, tc := range []struct {
		name, job, want string
	}{
		{"TF ports past 65535", head + "base_port = 65534\n[job.roles]\nworker = 3\n" + host,
			"job.toml:6: job.base_port: worker-2 on c would listen on port 65536: tasks on one host take base_port, base_port + 1, ..., and 65536 is past 65535 (write base_port = 65533 or lower)"},
		{"checkpoint_dir the workdir", head + "checkpoint_dir = \".\"\n[job.roles]\nworker = 1\n" + host,
			`job.toml:6: job.checkpoint_dir: checkpoint_dir "." is the workdir itself`},
		{"checkpoint_dir inside .drover", head + "checkpoint_dir = \".drover/checkpoints\"\n[job.roles]\nworker = 1\n" + host,
			`job.toml:6: job.checkpoint_dir: checkpoint_dir ".drover/checkpoints" is inside the workdir's .drover`},
		{"checkpoint_mirror inside the code", head + "checkpoint_mirror = \"mirror\"\n[job.roles]\nworker = 1\n" + host,
			`job.toml:6: job.checkpoint_mirror: checkpoint_mirror "mirror" is inside the code directory`},
		{"NUL in an argument", "[job]\nname = \"p\"\nframework = \"pytorch\"\ncommand = [\"python3\", \"a\\u0000b\"]\n" + host,
			"job.toml:4: job.command: element 2 contains a NUL byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(t.TempDir(), "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(tc.job), 0o644))
			var out, errb bytes.Buffer
			code := run([]string{"drover", "plan", job}, &out, &errb)
			assert.Equal(t, agent.ExitUsage, code, errb.String())
			assert.Contains(t, errb.String(), "drover: "+filepath.Dir(job)+"/"+tc.want)
		})
	}
	// base_port = 65533 fits exactly.
	job := filepath.Join(t.TempDir(), "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(head+"base_port = 65533\n[job.roles]\nworker = 3\n"+host), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"drover", "plan", job}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "65535")
}
