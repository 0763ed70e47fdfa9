package plan

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

// TestPlanNCCLEnv: which processes get NCCL_RAS_ADDR and PyTorch's
// flight recorder, and that a job's own value wins.
func TestPlanNCCLEnv(t *testing.T) {
	home := map[string]string{"a": "/home/u"}
	addr := "127.0.0.1:" + strconv.Itoa(RASPort("demo", "drover/demo", 29500))
	prefix := "/home/u/drover/demo/.drover/flightrec/attempt-2/rank-"
	recorder := map[string]string{traceBufferEnv: "2000", dumpOnTimeout: "1", FlightRecEnv: prefix}
	for _, tc := range []struct {
		name    string // the job's master_port is 29500
		fw      config.Framework
		host    config.Host
		jobEnv  map[string]string
		hostEnv map[string]string
		want    map[string]string // the NCCL and flight recorder variables set
	}{
		{name: "pytorch on a GPU", fw: config.PyTorch, host: gpuHost("a", "10.0.0.1", 0),
			want: merge(map[string]string{RASAddrEnv: addr}, recorder)},
		{name: "torchrun on a GPU", fw: config.Torchrun, host: gpuHost("a", "10.0.0.1", 0, 1),
			want: merge(map[string]string{RASAddrEnv: addr}, recorder)},
		{name: "jax on a GPU: RAS, no torch", fw: config.JAX, host: gpuHost("a", "10.0.0.1", 0),
			want: map[string]string{RASAddrEnv: addr}},
		{name: "tensorflow on a GPU: not NCCL's RAS", fw: config.TensorFlow, host: gpuHost("a", "10.0.0.1", 0),
			want: map[string]string{}},
		{name: "pytorch without a GPU: gloo", fw: config.PyTorch, host: cpuHost("a", "10.0.0.1"),
			want: map[string]string{}},
		{name: "a job that declares NCCL_RAS_ENABLE on a CPU host", fw: config.PyTorch, host: cpuHost("a", "10.0.0.1"),
			jobEnv: map[string]string{rasEnableEnv: "1"},
			want:   merge(map[string]string{rasEnableEnv: "1", RASAddrEnv: addr}, recorder)},
		{name: "a host's [host.env] declares it", fw: config.PyTorch, host: cpuHost("a", "10.0.0.1"),
			hostEnv: map[string]string{rasEnableEnv: "1"},
			want:    merge(map[string]string{rasEnableEnv: "1", RASAddrEnv: addr}, recorder)},
		{name: "RAS off: no address, the recorder still", fw: config.PyTorch, host: gpuHost("a", "10.0.0.1", 0),
			jobEnv: map[string]string{rasEnableEnv: "0"},
			want:   merge(map[string]string{rasEnableEnv: "0"}, recorder)},
		{name: "the job's own values win", fw: config.PyTorch, host: gpuHost("a", "10.0.0.1", 0),
			jobEnv: map[string]string{RASAddrEnv: "127.0.0.1:28028", traceBufferEnv: "100", FlightRecEnv: "/tmp/fr-"},
			want:   map[string]string{RASAddrEnv: "127.0.0.1:28028", traceBufferEnv: "100", dumpOnTimeout: "1", FlightRecEnv: "/tmp/fr-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.host
			h.Env = tc.hostEnv
			cfg := testConfig(tc.fw, h)
			cfg.Job.Env = tc.jobEnv
			cfg.Job.Roles.Worker = 1
			p := mustBuild(t, PlanInput{Config: cfg, HostHome: home, RestartCount: 2})
			for _, pr := range p.Processes {
				got := map[string]string{}
				for _, k := range []string{rasEnableEnv, RASAddrEnv, traceBufferEnv, dumpOnTimeout, FlightRecEnv} {
					if v, ok := pr.Env[k]; ok {
						got[k] = v
					}
				}
				assert.Equal(t, tc.want, got, pr.Name())
			}
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestRASPort: a port of the job's own, stable, in drover's range, and
// another for another job or another workdir on the host.
func TestRASPort(t *testing.T) {
	p := RASPort("mnist", "drover/mnist", 29500)
	assert.Equal(t, p, RASPort("mnist", "drover/mnist", 29500), "the same in every attempt and run")
	assert.GreaterOrEqual(t, p, rasPortBase)
	assert.Less(t, p, rasPortBase+rasPorts)
	assert.Less(t, rasPortBase+rasPorts, 32768, "below Linux's ephemeral ports")
	assert.NotEqual(t, p, RASPort("resnet", "drover/mnist", 29500))
	assert.NotEqual(t, p, RASPort("mnist", "drover/mnist-2", 29500))
	assert.NotEqual(t, 28028, p, "not NCCL's default, which every job shares")
	// Never the master_port, which rank 0's host listens on too.
	assert.Equal(t, p+1, RASPort("mnist", "drover/mnist", p))
	last := rasPortBase + rasPorts - 1
	for i := range 1_000_000 {
		job := "j" + strconv.Itoa(i)
		if RASPort(job, "w", 0) == last {
			assert.Equal(t, rasPortBase, RASPort(job, "w", last), "wraps within the range")
			return
		}
	}
	t.Fatal("no job name hashes to the range's last port")
}

// TestFlightRecorderFiles: one file per rank, the rank appended to the
// prefix as torch does; a torchrun node's ranks are its host's share.
func TestFlightRecorderFiles(t *testing.T) {
	cfg := testConfig(config.Torchrun, gpuHost("a", "10.0.0.1", 0, 1), gpuHost("b", "10.0.0.2", 0, 1, 2))
	p := mustBuild(t, PlanInput{Config: cfg, HostHome: map[string]string{"a": "/h", "b": "/h"}})
	files := p.FlightRecorderFiles()
	require.Len(t, files, 5)
	pre := "/h/drover/demo/.drover/flightrec/attempt-0/rank-"
	assert.Equal(t, RankFile{Host: "a", Rank: 1, Path: pre + "1"}, files[1])
	assert.Equal(t, RankFile{Host: "b", Rank: 2, Path: pre + "2"}, files[2])
	assert.Equal(t, RankFile{Host: "b", Rank: 4, Path: pre + "4"}, files[4])

	cfg = testConfig(config.PyTorch, cpuHost("a", "10.0.0.1"))
	assert.Empty(t, mustBuild(t, PlanInput{Config: cfg}).FlightRecorderFiles(), "gloo on CPUs: no recorder")
}
