package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torchEnvJob writes a pytorch job running script from testdata/torchenv
// on the first two fleet hosts, two ranks each, and returns its directory.
func torchEnvJob(t *testing.T, name string, command []string) string {
	t.Helper()
	code, err := filepath.Abs(filepath.Join("testdata", "torchenv"))
	require.NoError(t, err)
	dir := t.TempDir()
	hosts := fleet.ClusterHosts()[:2]
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = %q\nframework = \"pytorch\"\ncommand = %s\ncode = %q\n", name, tomlList(command), code)
	fmt.Fprintf(&b, "workdir = %q\nprocs_per_host = 2\nmax_restarts = 0\nstop_grace = \"2s\"\nmaster_port = 29531\nexclude = [\"__pycache__/\"]\n",
		fmt.Sprintf("e2e/%s-%d", name, os.Getpid()))
	fmt.Fprintf(&b, "\n[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for _, h := range hosts {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\n", h.Name, h.Address)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.toml"), []byte(b.String()), 0o644))
	return dir
}

func tomlList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestTorchWorkerEnv launches a check in the style of torch's own
// elastic-agent env test with real torch on two fleet hosts, two ranks
// each: every variable torchrun's agent gives a worker is there with
// torchrun's value, is_torchelastic_launched() is True, and env://
// rendezvous and an all_reduce over gloo work.
func TestTorchWorkerEnv(t *testing.T) {
	needFleet(t)
	dir := torchEnvJob(t, "envcheck", []string{hostPython, "envcheck.py", "envcheck", "0", "2"})
	r := startDrover(t, dir, "run", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	code := r.wait(t)
	require.Equal(t, 0, code, "drover exit status; output:\n%s", r.output())
	out, err := os.ReadFile(r.stdout)
	require.NoError(t, err)
	for rank := range 4 {
		assert.Contains(t, string(out), fmt.Sprintf("ENVCHECK OK rank %d local %d of 4", rank, rank%2))
	}
}

// TestRootCauseInSummary: a rank that fails under torch's @record has its
// exception, and the line that raised it, in drover's failure event and
// end-of-run summary.
func TestRootCauseInSummary(t *testing.T) {
	needFleet(t)
	dir := torchEnvJob(t, "rootcause", []string{hostPython, "fail.py"})
	r := startDrover(t, dir, "run", "--quiet", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	code := r.wait(t)
	require.Equal(t, 1, code, "drover exit status; output:\n%s", r.output())
	events := r.events(t)
	host := fleet.Hosts[1].Name
	want := "RuntimeError: boom from rank 3 (fail.py:11)"
	assert.Contains(t, events, "worker-3@"+host+" exited 1: "+want, "failure event")
	assert.Contains(t, events, "root cause: worker-3 on "+host+": "+want, "summary")
}
