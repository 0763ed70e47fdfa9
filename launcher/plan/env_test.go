package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
)

// dgxReport is the probe's report of an 8-GPU DGX A100 whose busyGPUs each
// run a training process holding 20 GiB; the others are idle.
func dgxReport(host string, busyGPUs ...int) gpu.HostReport {
	rep := gpu.HostReport{Host: host, Source: gpu.SourceNVML, Driver: "550.54.15", CUDA: "12.4"}
	for i := range 8 {
		d := gpu.Device{Index: i, UUID: fmt.Sprintf("GPU-0000000%d", i), Name: "NVIDIA A100-SXM4-40GB",
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 7+8*i), MemoryTotalMiB: 40960, MemoryUsedMiB: 4, Processes: []gpu.Process{}}
		if slices.Contains(busyGPUs, i) {
			d.MemoryUsedMiB = 20 << 10
			d.Processes = []gpu.Process{{PID: 1000 + i, Name: "python", UsedMiB: 20 << 10}}
		}
		rep.Devices = append(rep.Devices, d)
	}
	return rep
}

// planOnDGX takes two 8-GPU hosts whose GPUs 2 and 5 are busy,
// selects their free GPUs as drover run does, and plans fw on them.
func planOnDGX(t *testing.T, fw config.Framework) (*Plan, map[string][]int) {
	t.Helper()
	cfg := testConfig(fw, autoHost("dgx-a", "10.0.0.1"), autoHost("dgx-b", "10.0.0.2"))
	cfg.Job.GPUMaxUsedMiB = config.DefaultGPUMaxUsedMiB
	in := PlanInput{Config: cfg, GPUs: map[string]HostGPUs{}}
	selected := map[string][]int{}
	for _, h := range cfg.Hosts {
		rep := dgxReport(h.Name, 2, 5)
		require.Len(t, rep.Devices, 8, "probe of %s: %s", h.Name, rep.Reason)
		sel, err := gpu.Select(h.Name, gpu.Policy{GPUs: gpu.Spec{Auto: true}, MaxUsedMiB: cfg.Job.GPUMaxUsedMiB}, rep)
		require.NoError(t, err)
		require.Equal(t, []int{0, 1, 3, 4, 6, 7}, sel.Indices, "skipped: %+v", sel.Skipped)
		require.Equal(t, []int{0, 1, 3, 4, 6, 7}, sel.Indices, "busy GPUs 2 and 5 are not selected")
		in.GPUs[h.Name] = HostGPUs{Indices: sel.Indices, Probed: true}
		selected[h.Name] = sel.Indices
	}
	return mustBuild(t, in), selected
}

// TestLocalRankIndexesVisibleDevices is the bug that broke every multi-GPU
// host: each rank saw only its own GPU, so torch.cuda.set_device(LOCAL_RANK)
// asked rank 1 for a device that did not exist. As under torchrun, every
// rank on a host sees the host's GPUs and LOCAL_RANK indexes that list.
func TestLocalRankIndexesVisibleDevices(t *testing.T) {
	p, selected := planOnDGX(t, config.PyTorch)
	require.Len(t, p.Processes, 12)
	for _, pr := range p.Processes {
		visible := strings.Split(pr.Env["CUDA_VISIBLE_DEVICES"], ",")
		lr, err := strconv.Atoi(pr.Env["LOCAL_RANK"])
		require.NoError(t, err)
		require.Less(t, lr, len(visible), "%s: LOCAL_RANK %d out of CUDA_VISIBLE_DEVICES %v", pr.Name(), lr, visible)
		require.Len(t, pr.GPUs, 1)
		assert.Equal(t, strconv.Itoa(pr.GPUs[0]), visible[lr],
			"%s: CUDA_VISIBLE_DEVICES[LOCAL_RANK] is the GPU the plan shows", pr.Name())
		assert.NotContains(t, visible, "2", "%s: busy GPU visible", pr.Name())
		assert.NotContains(t, visible, "5", "%s: busy GPU visible", pr.Name())
		assert.Equal(t, selected[pr.Host.Name], pr.Visible)
		assert.Equal(t, "6", pr.Env["LOCAL_WORLD_SIZE"])
	}
	// Every rank uses a different GPU of its host.
	used := map[string]bool{}
	for _, pr := range p.Processes {
		key := pr.Host.Name + "/" + strconv.Itoa(pr.GPUs[0])
		assert.False(t, used[key], "two ranks on %s", key)
		used[key] = true
	}
}

// Under torchrun, torchrun gives LOCAL_RANK 0..nproc_per_node-1 to the
// workers it spawns: that must index the host's CUDA_VISIBLE_DEVICES too.
func TestLocalRankTorchrun(t *testing.T) {
	p, selected := planOnDGX(t, config.Torchrun)
	require.Len(t, p.Processes, 2)
	for _, pr := range p.Processes {
		visible := strings.Split(pr.Env["CUDA_VISIBLE_DEVICES"], ",")
		nproc := flagValue(t, pr.Command, "--nproc_per_node")
		require.Equal(t, strconv.Itoa(len(visible)), nproc, "one worker per visible GPU")
		for lr := 0; lr < len(visible); lr++ {
			assert.Equal(t, strconv.Itoa(selected[pr.Host.Name][lr]), visible[lr])
			assert.NotEqual(t, "2", visible[lr])
			assert.NotEqual(t, "5", visible[lr])
		}
	}
}

func flagValue(t *testing.T, argv []string, flag string) string {
	t.Helper()
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	t.Fatalf("%s not in %q", flag, argv)
	return ""
}

// TestTorchElasticEnv checks each variable torchrun's elastic agent gives a
// worker, with torchrun's values for a static launch of one role.
func TestTorchElasticEnv(t *testing.T) {
	cfg := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0, 1), gpuHost("b", "10.0.0.2", 3), cpuHost("c", "10.0.0.3"))
	cfg.Job.MaxRestarts = 4
	p := mustBuild(t, PlanInput{Config: cfg, RestartCount: 2, HostHome: map[string]string{"a": "/home/u"}})
	require.Len(t, p.Processes, 4)
	for _, pr := range p.Processes {
		e := pr.Env
		assert.Equal(t, "default", e["ROLE_NAME"])
		assert.Equal(t, e["RANK"], e["ROLE_RANK"])
		assert.Equal(t, "4", e["ROLE_WORLD_SIZE"])
		assert.Equal(t, "4", e["WORLD_SIZE"])
		assert.Equal(t, "3", e["GROUP_WORLD_SIZE"])
		assert.Equal(t, "2", e["TORCHELASTIC_RESTART_COUNT"])
		assert.Equal(t, "4", e["TORCHELASTIC_MAX_RESTARTS"])
		assert.Equal(t, "demo", e["TORCHELASTIC_RUN_ID"])
		assert.Equal(t, "False", e["TORCHELASTIC_USE_AGENT_STORE"])
		assert.Equal(t, "1", e["TORCH_NCCL_ASYNC_ERROR_HANDLING"])
		assert.Equal(t, "1", e["NCCL_ASYNC_ERROR_HANDLING"])
	}
	byName := map[string]Process{}
	for _, pr := range p.Processes {
		byName[pr.Name()] = pr
	}
	assert.Equal(t, "1", byName["worker-0"].Env["OMP_NUM_THREADS"], "two ranks on host a")
	assert.NotContains(t, byName["worker-2"].Env, "OMP_NUM_THREADS", "one rank on host b")
	assert.Equal(t, "/home/u/drover/demo/.drover/errors/attempt-2/worker-1.json", byName["worker-1"].Env["TORCHELASTIC_ERROR_FILE"])
	assert.Equal(t, "~/drover/demo/.drover/errors/attempt-2/worker-2.json", byName["worker-2"].Env["TORCHELASTIC_ERROR_FILE"])
	assert.Equal(t, "", byName["worker-3"].Env["CUDA_VISIBLE_DEVICES"], "CPU host sees no GPU")
}

// [job.env] replaces drover's tunable defaults but not what the
// rendezvous depends on.
func TestJobEnvTunables(t *testing.T) {
	cfg := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0, 1))
	cfg.Job.Env = map[string]string{"OMP_NUM_THREADS": "8", "NCCL_ASYNC_ERROR_HANDLING": "0",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth1"}
	p := mustBuild(t, PlanInput{Config: cfg})
	for k, v := range cfg.Job.Env {
		assert.Equal(t, v, p.Processes[0].Env[k], k)
	}
	for _, name := range []string{"TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "ROLE_NAME", "GROUP_WORLD_SIZE",
		"TORCHELASTIC_USE_AGENT_STORE", "CUDA_DEVICE_ORDER"} {
		cfg.Job.Env = map[string]string{name: "x"}
		_, err := Build(PlanInput{Config: cfg})
		assert.True(t, config.IsConfigError(err), "%s: %v", name, err)
	}
}

func TestBuildJAX(t *testing.T) {
	for _, tc := range []struct {
		name    string
		perHost int
		hosts   []config.Host
		want    []string // per process: host visible ids gpus
		wantErr string
	}{
		{name: "one per host", perHost: 1,
			hosts: []config.Host{gpuHost("a", "10.0.0.1", 0, 1, 3), gpuHost("b", "10.0.0.2", 0, 1, 2)},
			want:  []string{"a 0,1,3 0,1,2 0", "b 0,1,2 0,1,2 1"}},
		{name: "one per GPU", perHost: 2,
			hosts: []config.Host{gpuHost("a", "10.0.0.1", 4, 6), gpuHost("b", "10.0.0.2", 0, 1)},
			want:  []string{"a 4,6 0 0", "a 4,6 1 1", "b 0,1 0 2", "b 0,1 1 3"}},
		{name: "cpu hosts", perHost: 2,
			hosts: []config.Host{cpuHost("a", "10.0.0.1")},
			want:  []string{"a  - 0", "a  - 1"}},
		{name: "uneven", perHost: 2,
			hosts:   []config.Host{gpuHost("a", "10.0.0.1", 0, 1, 2)},
			wantErr: "a has 3 GPUs selected, which 2 processes cannot share evenly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(config.JAX, tc.hosts...)
			cfg.Job.ProcsPerHost = tc.perHost
			p, err := Build(PlanInput{Config: cfg})
			if tc.wantErr != "" {
				require.True(t, config.IsConfigError(err), "%v", err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, pr := range p.Processes {
				ids, ok := pr.Env["JAX_LOCAL_DEVICE_IDS"]
				if !ok {
					ids = "-"
				}
				got = append(got, strings.Join([]string{pr.Host.Name, pr.Env["CUDA_VISIBLE_DEVICES"], ids, pr.Env["JAX_PROCESS_ID"]}, " "))
				assert.Equal(t, "10.0.0.1:29500", pr.Env["JAX_COORDINATOR_ADDRESS"])
				assert.Equal(t, strconv.Itoa(len(tc.want)), pr.Env["JAX_NUM_PROCESSES"])
				assert.Equal(t, pr.Env["JAX_PROCESS_ID"], strconv.Itoa(pr.Index))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestEnvDocListsEveryVariable keeps the table of docs/environment.md
// ("What each process gets") complete: every variable any framework's plan
// sets appears in it.
func TestEnvDocListsEveryVariable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "environment.md"))
	require.NoError(t, err)
	doc := string(b)
	require.True(t, strings.HasPrefix(doc, "# What each process gets\n"), "docs/environment.md no longer starts with the table's heading")
	end := strings.Index(doc, "\n## ")
	require.Greater(t, end, 0)
	table := doc[:end]
	for _, cfg := range everyFramework() {
		p := mustBuild(t, PlanInput{Config: cfg, RunID: "20260102-030405-a1b2c3", Attempt: 1})
		for _, pr := range p.Processes {
			for name := range pr.Env {
				assert.Contains(t, table, "`"+name+"`", "%s sets %s; the table in docs/environment.md does not list it", cfg.Job.Framework, name)
			}
		}
	}
}

// With hang_timeout every process gets its progress file and faulthandler
// on; [job.env] may turn faulthandler off.
func TestPlanHangEnv(t *testing.T) {
	cfg := testConfig(config.PyTorch, cpuHost("b", "10.0.0.2"))
	cfg.Job.HangTimeout = time.Minute
	p := mustBuild(t, PlanInput{Config: cfg, HostHome: map[string]string{"b": "/home/u"}})
	env := p.Processes[0].Env
	assert.Equal(t, "/home/u/"+cfg.Job.Workdir+"/.drover/progress/worker-0", env["DROVER_PROGRESS_FILE"])
	assert.Equal(t, "1", env["PYTHONFAULTHANDLER"])

	cfg.Job.Env = map[string]string{"PYTHONFAULTHANDLER": ""}
	p = mustBuild(t, PlanInput{Config: cfg})
	assert.Equal(t, "", p.Processes[0].Env["PYTHONFAULTHANDLER"], "[job.env] wins")

	cfg.Job.HangTimeout = 0
	cfg.Job.Env = nil
	p = mustBuild(t, PlanInput{Config: cfg, HostHome: map[string]string{"b": "/home/u"}})
	assert.Equal(t, "/home/u/"+cfg.Job.Workdir+"/.drover/progress/worker-0", p.Processes[0].Env["DROVER_PROGRESS_FILE"],
		"every job has a progress file: drover top reads its step=N")
	assert.NotContains(t, p.Processes[0].Env, "PYTHONFAULTHANDLER", "faulthandler only with hang_timeout")
}

// The ports a restart's preflight found free replace the configured ones
// in every process's environment; the plan of the configured job is
// unchanged.
func TestPlanMovedPorts(t *testing.T) {
	hosts := []config.Host{cpuHost("a", "10.0.0.1"), cpuHost("b", "10.0.0.2")}
	cfg := testConfig(config.PyTorch, hosts...)
	p := mustBuild(t, PlanInput{Config: cfg, MasterPort: 41000})
	for _, pr := range p.Processes {
		assert.Equal(t, "41000", pr.Env["MASTER_PORT"], pr.Name())
	}
	assert.Equal(t, 29500, cfg.Job.MasterPort, "the config is not changed")
	assert.Equal(t, "29500", mustBuild(t, PlanInput{Config: cfg}).Processes[0].Env["MASTER_PORT"])

	tf := tfConfig(config.Roles{Chief: 1, Worker: 3}, hosts...)
	tf.Job.ProcsPerHost = 2
	p = mustBuild(t, PlanInput{Config: tf, BasePorts: map[string]int{"10.0.0.2": 43000}})
	var ports []int
	for _, pr := range p.Processes {
		ports = append(ports, pr.Port)
		if pr.Host.Name == "b" {
			assert.GreaterOrEqual(t, pr.Port, 43000, pr.Name())
			assert.Contains(t, pr.Env["TF_CONFIG"], "10.0.0.2:"+strconv.Itoa(pr.Port))
		} else {
			assert.Less(t, pr.Port, 43000, pr.Name())
		}
	}
	t.Logf("ports %v", ports)
}

// TestEverySetVariableIsReservedOrTunable keeps config's reserved-env table
// (what [job.env] may not set) in step with what Build sets: a variable
// the plan sets that is neither reserved nor tunable would be silently
// overridden, or silently ignored, by [job.env].
func TestEverySetVariableIsReservedOrTunable(t *testing.T) {
	for _, cfg := range everyFramework() {
		p := mustBuild(t, PlanInput{Config: cfg, RunID: "20260102-030405-a1b2c3", Attempt: 1})
		for _, pr := range p.Processes {
			for name := range pr.Env {
				fw := cfg.Job.Framework
				assert.True(t, config.ReservedEnv(fw, name) || config.TunableEnv(name),
					"%s sets %s, which config.ReservedEnv does not list for %s and is not tunable", fw, name, fw)
			}
		}
	}
}

// everyFramework is one small job of each framework, on a GPU host and a
// CPU host: together their plans set every variable drover sets.
func everyFramework() []*config.Config {
	hosts := []config.Host{gpuHost("a", "10.0.0.1", 0, 1), cpuHost("b", "10.0.0.2")}
	return []*config.Config{
		testConfig(config.PyTorch, hosts...), testConfig(config.Torchrun, hosts...),
		tfConfig(config.Roles{Chief: 1, Worker: 1, PS: 1}, hosts...), testConfig(config.JAX, hosts...),
		hangConfig(hosts...), trackedConfig(hosts...),
	}
}

// trackedConfig is a pytorch job with tracker = "wandb", which adds the
// WANDB_* ids when the plan has a run id.
func trackedConfig(hosts ...config.Host) *config.Config {
	c := testConfig(config.PyTorch, hosts...)
	c.Job.Tracker = config.TrackerWandb
	return c
}

// hangConfig is a pytorch job with hang_timeout, which adds
// DROVER_PROGRESS_FILE and PYTHONFAULTHANDLER.
func hangConfig(hosts ...config.Host) *config.Config {
	c := testConfig(config.PyTorch, hosts...)
	c.Job.HangTimeout = time.Minute
	return c
}

// Every process of every framework gets PYTHONUNBUFFERED=1 (its stdout is
// a pipe, and Python would hold print() back in 8 KiB blocks), and
// [job.env] may replace it.
func TestPlanUnbufferedEveryFramework(t *testing.T) {
	for _, cfg := range everyFramework() {
		p := mustBuild(t, PlanInput{Config: cfg})
		for _, pr := range p.Processes {
			assert.Equal(t, "1", pr.Env["PYTHONUNBUFFERED"], "%s: %s", cfg.Job.Framework, pr.Name())
		}
		cfg.Job.Env = map[string]string{"PYTHONUNBUFFERED": ""}
		p = mustBuild(t, PlanInput{Config: cfg})
		assert.Equal(t, "", p.Processes[0].Env["PYTHONUNBUFFERED"], "%s: [job.env] wins", cfg.Job.Framework)
	}
}

// Every process of an attempt gets the run's id and the attempt's
// number; tracker = "wandb" gives the lead process alone WANDB_RUN_ID and
// WANDB_RESUME, and every process WANDB_RUN_GROUP, all from the run id.
func TestPlanRunEnv(t *testing.T) {
	const id = "20260102-030405-a1b2c3"
	hosts := []config.Host{gpuHost("a", "10.0.0.1", 0, 1), cpuHost("b", "10.0.0.2")}
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		lead string // the process given WANDB_RUN_ID
	}{
		{"pytorch", testConfig(config.PyTorch, hosts...), "worker-0"},
		{"torchrun", testConfig(config.Torchrun, hosts...), "node-0"},
		{"jax", testConfig(config.JAX, hosts...), "process-0"},
		{"tensorflow chief", tfConfig(config.Roles{Chief: 1, Worker: 2, PS: 1}, hosts...), "chief-0"},
		{"tensorflow without chief", tfConfig(config.Roles{Worker: 2, PS: 1}, hosts...), "worker-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustBuild(t, PlanInput{Config: tc.cfg, RunID: id, Attempt: 3, RestartCount: 2})
			for _, pr := range p.Processes {
				assert.Equal(t, id, pr.Env["DROVER_RUN_ID"], pr.Name())
				assert.Equal(t, "3", pr.Env["DROVER_ATTEMPT"], pr.Name())
				assert.NotContains(t, pr.Env, "WANDB_RUN_GROUP", "%s: no tracker, no tracker ids", pr.Name())
			}
			tc.cfg.Job.Tracker = config.TrackerWandb
			p = mustBuild(t, PlanInput{Config: tc.cfg, RunID: id, Attempt: 3})
			var leads []string
			for _, pr := range p.Processes {
				assert.Equal(t, id, pr.Env["WANDB_RUN_GROUP"], pr.Name())
				if pr.Env["WANDB_RUN_ID"] != "" {
					leads = append(leads, pr.Name())
					assert.Equal(t, id, pr.Env["WANDB_RUN_ID"])
					assert.Equal(t, "allow", pr.Env["WANDB_RESUME"])
				} else {
					assert.NotContains(t, pr.Env, "WANDB_RESUME", pr.Name())
				}
			}
			assert.Equal(t, []string{tc.lead}, leads, "one process, the lead, has the tracker's run id")
		})
	}
	// `drover plan` has no run yet: no run id, no attempt, no tracker ids.
	cfg := testConfig(config.PyTorch, hosts...)
	cfg.Job.Tracker = config.TrackerWandb
	for _, pr := range mustBuild(t, PlanInput{Config: cfg}).Processes {
		for _, k := range []string{"DROVER_RUN_ID", "DROVER_ATTEMPT", "WANDB_RUN_ID", "WANDB_RUN_GROUP", "WANDB_RESUME"} {
			assert.NotContains(t, pr.Env, k, pr.Name())
		}
	}
	// [job.env] may name the tracker's ids itself.
	cfg.Job.Env = map[string]string{"WANDB_RUN_GROUP": "mine"}
	assert.Equal(t, "mine", mustBuild(t, PlanInput{Config: cfg, RunID: id}).Processes[1].Env["WANDB_RUN_GROUP"])
}

// Issue 41: a plan whose world size differs from the last attempt's (the
// group shrank or grew) says so to every process, with the old size; a
// plan of the same size, or the first, says nothing.
func TestPlanWorldChanged(t *testing.T) {
	for _, cfg := range everyFramework() {
		p := mustBuild(t, PlanInput{Config: cfg})
		w := p.WorldSize()
		require.Positive(t, w)
		for _, prev := range []int{0, w} {
			for _, pr := range mustBuild(t, PlanInput{Config: cfg, PrevWorldSize: prev}).Processes {
				assert.NotContains(t, pr.Env, "DROVER_WORLD_CHANGED", "%s, previous world %d", cfg.Job.Framework, prev)
				assert.NotContains(t, pr.Env, "DROVER_PREV_WORLD_SIZE")
			}
		}
		for _, pr := range mustBuild(t, PlanInput{Config: cfg, PrevWorldSize: w + 2}).Processes {
			assert.Equal(t, "1", pr.Env["DROVER_WORLD_CHANGED"], "%s", cfg.Job.Framework)
			assert.Equal(t, strconv.Itoa(w+2), pr.Env["DROVER_PREV_WORLD_SIZE"])
		}
	}
}

// A Python command gets drover's stack hook first on PYTHONPATH, before
// what [job.env] puts there; another command gets neither variable.
func TestPlanStacksHookEnv(t *testing.T) {
	cfg := testConfig(config.PyTorch, cpuHost("b", "10.0.0.2"))
	home := map[string]string{"b": "/home/u"}
	env := mustBuild(t, PlanInput{Config: cfg, HostHome: home}).Processes[0].Env
	dir := "/home/u/drover/demo/.drover/stacks"
	assert.Equal(t, dir, env["DROVER_STACKS_DIR"])
	assert.Equal(t, agent.StacksHookDir(dir), env["PYTHONPATH"], "the agent writes the hook where the plan points")

	cfg.Job.Env = map[string]string{"PYTHONPATH": "/opt/lib"}
	env = mustBuild(t, PlanInput{Config: cfg, HostHome: home}).Processes[0].Env
	assert.Equal(t, agent.StacksHookDir(dir)+":/opt/lib", env["PYTHONPATH"])

	cfg.Job.Env = nil
	cfg.Job.Command = []string{"./train-binary", "--steps", "3"}
	env = mustBuild(t, PlanInput{Config: cfg, HostHome: home}).Processes[0].Env
	assert.NotContains(t, env, "DROVER_STACKS_DIR")
	assert.NotContains(t, env, "PYTHONPATH")
}

func TestPythonCommand(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"python3", "train.py"}, true},
		{[]string{"/usr/bin/python3.11", "-m", "x"}, true},
		{[]string{"torchrun", "--nproc_per_node", "2", "t.py"}, true},
		{[]string{"bash", "-c", "source venv/bin/activate && python train.py"}, true},
		{[]string{"./train.py"}, true},
		{[]string{"./trainer", "--steps", "3"}, false},
		{[]string{"sh", "-c", "sleep 60"}, false},
	} {
		assert.Equal(t, tc.want, PythonCommand(tc.argv), "%q", tc.argv)
	}
}
