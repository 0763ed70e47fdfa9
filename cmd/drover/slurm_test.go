package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

const slurmJob = `[job]
name = "ddp"
framework = "pytorch"
command = ["python3", "train.py", "--epochs", "3"]
code = "."
workdir = "drover/ddp"
[job.env]
NCCL_DEBUG = "WARN"
`

// allocationEnv is what sbatch --nodes=3 --gpus-per-node=a100:2 sets.
func setAllocationEnv(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_JOB_NODELIST", "gpu[01-02],cpu7")
	t.Setenv("SLURM_GPUS_PER_NODE", "a100:2")
}

// TestPlanInAllocationEqualsInventory: the plan drover computes inside an
// allocation, from the environment alone, is the plan of the same hosts
// given as an inventory (same ranks, roles, GPUs and env), apart from how
// hosts are addressed.
func TestPlanInAllocationEqualsInventory(t *testing.T) {
	for _, framework := range []string{"pytorch", "torchrun", "jax"} {
		t.Run(framework, func(t *testing.T) {
			dir := t.TempDir()
			job := strings.Replace(slurmJob, `"pytorch"`, `"`+framework+`"`, 1)
			if framework == "torchrun" {
				job = strings.Replace(job, `["python3", "train.py"`, `["torchrun", "train.py"`, 1)
			}
			write := func(name, body string) string {
				p := filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
				return p
			}
			noHosts := write("job.toml", job)
			slurmInv := write("slurm.toml", "inventory = \"slurm\"\n"+job)
			inv := write("fleet.toml", `
[[host]]
name = "gpu01"
address = "10.0.0.11"
gpus = [0, 1]
[[host]]
name = "gpu02"
address = "10.0.0.12"
gpus = [0, 1]
[[host]]
name = "cpu7"
address = "10.0.0.17"
gpus = [0, 1]
`)
			code, want, errOut := runPlan(t, "--format", "json", "--inventory", inv, noHosts)
			require.Equal(t, 0, code, errOut)
			for from, to := range map[string]string{"10.0.0.11": "gpu01", "10.0.0.12": "gpu02", "10.0.0.17": "cpu7", `"transport": "ssh"`: `"transport": "slurm"`} {
				want = strings.ReplaceAll(want, from, to)
			}
			setAllocationEnv(t)
			for _, jobFile := range []string{noHosts, slurmInv} {
				code, got, errOut := runPlan(t, "--format", "json", jobFile)
				require.Equal(t, 0, code, errOut)
				got = strings.ReplaceAll(got, slurmInv, noHosts)
				assert.Equal(t, want, got, "plan of %s inside the allocation", filepath.Base(jobFile))
			}
		})
	}
}

// TestSlurmInventoryErrors: inventory = "slurm" outside an allocation, or
// next to hosts of its own, is a configuration error at its line.
func TestSlurmInventoryErrors(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "")
	dir := t.TempDir()
	p := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(p, []byte("inventory = \"slurm\"\n"+slurmJob+"[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n"), 0o644))
	code, _, errOut := runPlan(t, p)
	assert.Equal(t, agent.ExitUsage, code)
	assert.Contains(t, errOut, `job.toml:1: inventory: the job file has both inventory = "slurm" and [[host]] tables`)
	assert.Contains(t, errOut, `job.toml:1: inventory: inventory = "slurm" takes the hosts from the allocation, but drover is not running inside a Slurm allocation (SLURM_JOB_ID is not set)`)

	t.Setenv("SLURM_JOB_ID", "7")
	t.Setenv("SLURM_JOB_NODELIST", "n[3-1]")
	code, _, errOut = runPlan(t, p)
	assert.Equal(t, agent.ExitFailed, code)
	assert.Contains(t, errOut, `expand Slurm node list "n[3-1]": entry "n[3-1]": invalid range "3-1" (upper bound below lower)`)
}

// TestPlanSbatchGolden: drover plan --format sbatch prints the script
// drover submit submits, [slurm] options and flags merged (flags win).
func TestPlanSbatchGolden(t *testing.T) {
	job, err := filepath.Abs("../../examples/pytorch-ddp/job.toml")
	require.NoError(t, err)
	code, out, errOut := runPlan(t, "--format", "sbatch", "--partition", "gpu", "--gpus-per-node", "2", job)
	require.Equal(t, 0, code, errOut)
	bin, err := os.Executable()
	require.NoError(t, err)
	out = strings.ReplaceAll(out, filepath.Dir(job), "JOBDIR")
	out = strings.ReplaceAll(out, bin, "DROVER")
	golden := filepath.Join("testdata", "pytorch-ddp.sbatch")
	if *updatePlan {
		require.NoError(t, os.WriteFile(golden, []byte(out), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out)

	// A value sbatch would read differently is refused, not quoted.
	code, _, errOut = runPlan(t, "--format", "sbatch", "--partition", "gpu; rm -rf ~", job)
	assert.Equal(t, agent.ExitUsage, code)
	assert.Contains(t, errOut, `--partition "gpu; rm -rf ~" cannot stand in an #SBATCH line`)
}
