package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runPlan(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"drover", "plan"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestPlanTensorFlowPSExample is the acceptance check: the 2-host
// chief + 2 workers + ps example shows TF_CONFIG as the Kubeflow docs do.
func TestPlanTensorFlowPSExample(t *testing.T) {
	code, out, errOut := runPlan(t, "../../examples/tensorflow-ps/job.toml", "--format", "env")
	require.Equal(t, 0, code, errOut)
	cluster := `"cluster":{"chief":["10.0.0.11:2222"],"ps":["10.0.0.12:2223"],"worker":["10.0.0.11:2223","10.0.0.12:2222"]}`
	for _, task := range []string{
		`"task":{"type":"chief","index":0}`, `"task":{"type":"worker","index":0}`,
		`"task":{"type":"worker","index":1}`, `"task":{"type":"ps","index":0}`,
	} {
		assert.Contains(t, out, "export TF_CONFIG='{"+cluster+","+task+`,"environment":"cloud"}'`+"\n")
	}
	assert.Equal(t, 4, strings.Count(out, "export TF_CONFIG="))
	_, psSection, ok := strings.Cut(out, "# ps-0 on gpu-b (10.0.0.12)\n")
	require.True(t, ok, "no ps-0 section")
	assert.Contains(t, psSection, "export CUDA_VISIBLE_DEVICES=''\n", "ps tasks get an empty CUDA_VISIBLE_DEVICES")
}

func TestPlanTensorFlowMultiworkerExample(t *testing.T) {
	code, out, errOut := runPlan(t, "--format=json", "../../examples/tensorflow-multiworker/job.toml")
	require.Equal(t, 0, code, errOut)
	var doc struct {
		Processes []struct {
			Name string            `json:"name"`
			Env  map[string]string `json:"env"`
		} `json:"processes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	var names []string
	for _, p := range doc.Processes {
		names = append(names, p.Name)
		assert.NotContains(t, p.Env["TF_CONFIG"], `"ps"`)
	}
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-1", "worker-2"}, names)
}

func TestPlanFlagsAndErrors(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(`
[job]
name = "j"
framework = "pytorch"
command = ["python3", "train.py"]
code = "."

[job.env]
API_TOKEN = "s3cret"

[[host]]
name = "a"
address = "10.0.0.1"
gpus = [0]
`), 0o644))

	code, out, errOut := runPlan(t, job)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "worker-0  a     10.0.0.1")
	assert.NotContains(t, out, "s3cret")

	code, out, errOut = runPlan(t, job, "--format", "env", "--show-secrets")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "export API_TOKEN='s3cret'\n")

	code, _, errOut = runPlan(t, job, "--format", "yaml")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "table, env or json")

	// --probe asks every host which interface reaches MASTER_ADDR (the
	// NIC column), even with only pinned GPUs: a host it cannot reach
	// fails the plan, as it would fail drover run.
	code, _, errOut = runPlan(t, "--probe", job)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "connect to a (10.0.0.1:22)")

	code, _, errOut = runPlan(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "usage")

	code, _, errOut = runPlan(t, job, "--bogus")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "flag provided but not defined: -bogus")

	// A plan that cannot be laid out is a configuration error: exit 2.
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte(`
[job]
name = "j"
framework = "tensorflow"
command = ["python3", "train.py"]
code = "."

[job.roles]
chief = 1
worker = 5

[[host]]
name = "a"
address = "10.0.0.1"
gpus = [0, 1]
`), 0o644))
	code, _, errOut = runPlan(t, bad)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "need 6 slots")
}

func TestPlanInventory(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.toml")
	require.NoError(t, os.WriteFile(inv, []byte(`
[[host]]
name = "x"
address = "192.0.2.7"
gpus = [3]
`), 0o644))
	code, out, errOut := runPlan(t, "../../examples/tensorflow-multiworker/job.toml", "--inventory", inv)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "chief-0  x     192.0.2.7")
	assert.NotContains(t, out, "gpu-a")
}

var updatePlan = flag.Bool("update", false, "rewrite testdata/*.env")

// TestPlanJAXExample: `drover plan examples/jax/job.toml --format env`
// shows what jax.distributed.initialize reads, checked against a golden
// file because JAX itself cannot be installed where the tests run.
func TestPlanJAXExample(t *testing.T) {
	code, out, errOut := runPlan(t, "../../examples/jax/job.toml", "--format", "env")
	require.Equal(t, 0, code, errOut)
	golden := filepath.Join("testdata", "jax.env")
	if *updatePlan {
		require.NoError(t, os.WriteFile(golden, []byte(out), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out)
	for _, line := range []string{
		"export JAX_COORDINATOR_ADDRESS='10.0.0.11:1234'\n",
		"export JAX_NUM_PROCESSES='2'\n",
		"export JAX_PROCESS_ID='1'\n",
		"export JAX_LOCAL_DEVICE_IDS='0,1,2,3'\n",
		"export CUDA_VISIBLE_DEVICES='0,1,2,3'\n",
	} {
		assert.Contains(t, out, line)
	}
}

// Issue 41: drover plan --hosts-lost shows the plan the job shrinks to
// (ranks, WORLD_SIZE and MASTER_ADDR afresh, the world change said), and
// says when the job would stop instead.
func TestPlanHostsLost(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	write := func(minHosts string) {
		require.NoError(t, os.WriteFile(job, []byte(`
[job]
name = "j"
framework = "pytorch"
command = ["python3", "train.py"]
code = "."
procs_per_host = 2
`+minHosts+`
[[host]]
name = "h1"
address = "10.0.0.1"
gpus = []
[[host]]
name = "h2"
address = "10.0.0.2"
gpus = []
[[host]]
name = "h3"
address = "10.0.0.3"
gpus = []
`), 0o644))
	}
	write("min_hosts = 2")
	code, out, errOut := runPlan(t, job, "--format", "env", "--hosts-lost", "h1")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 4, strings.Count(out, "export WORLD_SIZE='4'\n"), out)
	assert.Equal(t, 4, strings.Count(out, "export MASTER_ADDR='10.0.0.2'\n"), "rank 0 moves to h2")
	assert.Equal(t, 4, strings.Count(out, "export DROVER_WORLD_CHANGED='1'\n"))
	assert.Equal(t, 4, strings.Count(out, "export DROVER_PREV_WORLD_SIZE='6'\n"))
	assert.NotContains(t, out, "10.0.0.1)")
	code, out, errOut = runPlan(t, job, "--hosts-lost", "h3")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "h3 lost with no spare: the group goes on with 2 of 3 hosts (min_hosts = 2), world size 6 -> 4")

	code, _, errOut = runPlan(t, job, "--hosts-lost", "h2,h3")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "the job would stop: cannot go on without h2, h3: 1 host(s) left, fewer than min_hosts = 2")
	code, _, errOut = runPlan(t, job, "--hosts-lost", "h9")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--hosts-lost: h9 is not a host of the plan (h1, h2, h3)")
	write("")
	code, _, errOut = runPlan(t, job, "--hosts-lost", "h3")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "min_hosts is unset")
}
