package plan

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/droverhq/drover/cluster/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gpuHost(name, addr string, gpus ...int) config.Host {
	return config.Host{Name: name, Address: addr, Transport: config.TransportSSH, Port: 22,
		GPUs: config.GPUSpec{List: gpus}}
}

func cpuHost(name, addr string) config.Host {
	return config.Host{Name: name, Address: addr, Transport: config.TransportSSH, Port: 22}
}

func autoHost(name, addr string) config.Host {
	h := cpuHost(name, addr)
	h.GPUs.Auto = true
	return h
}

func localHost(name, workdir string, gpus ...int) config.Host {
	return config.Host{Name: name, Address: "local", Transport: config.TransportLocal,
		Workdir: workdir, GPUs: config.GPUSpec{List: gpus}}
}

func spare(h config.Host) config.Host { h.Spare = true; return h }

func testConfig(fw config.Framework, hosts ...config.Host) *config.Config {
	return &config.Config{
		Path:          "/jobs/job.toml",
		InventoryPath: "/jobs/job.toml",
		Job: config.Job{
			Name: "demo", Framework: fw, Command: []string{"python3", "train.py", "--epochs", "3"},
			Code: "/jobs/code", Workdir: "drover/demo", CheckpointDir: "checkpoints",
			ProcsPerHost: 1, MasterPort: 29500, BasePort: 2222,
		},
		Hosts: withWorkdir(hosts, "drover/demo"),
	}
}

// withWorkdir gives every host without a workdir of its own the job's, as
// config.Load does.
func withWorkdir(hosts []config.Host, workdir string) []config.Host {
	out := make([]config.Host, len(hosts))
	for i, h := range hosts {
		if h.Workdir == "" {
			h.Workdir = workdir
		}
		out[i] = h
	}
	return out
}

func tfConfig(r config.Roles, hosts ...config.Host) *config.Config {
	c := testConfig(config.TensorFlow, hosts...)
	c.Job.Roles = r
	return c
}

func mustBuild(t *testing.T, in PlanInput) *Plan {
	t.Helper()
	p, err := Build(in)
	require.NoError(t, err)
	return p
}

// placed is a compact view of one process for placement tables:
// "name@host gpus port".
func placed(p *Plan) []string {
	var out []string
	for _, pr := range p.Processes {
		s := pr.Name() + "@" + pr.Host.Name + " gpus=" + joinInts(pr.GPUs)
		if pr.Port != 0 {
			s += " port=" + strconv.Itoa(pr.Port)
		}
		out = append(out, s)
	}
	return out
}

func TestBuildPyTorchPlacement(t *testing.T) {
	tests := []struct {
		name  string
		cfg   *config.Config
		gpus  map[string]HostGPUs
		want  []string
		notes []string
	}{{
		name: "uneven GPU counts, file order, spare unused",
		cfg: testConfig(config.PyTorch, gpuHost("b", "10.0.0.2", 0, 1, 2),
			spare(gpuHost("s", "10.0.0.9", 0)), gpuHost("a", "10.0.0.1", 3)),
		want:  []string{"worker-0@b gpus=0", "worker-1@b gpus=1", "worker-2@b gpus=2", "worker-3@a gpus=3"},
		notes: []string{"s: spare"},
	}, {
		name: "mixed GPU and CPU hosts",
		cfg: func() *config.Config {
			c := testConfig(config.PyTorch, cpuHost("c", "10.0.0.3"), gpuHost("g", "10.0.0.4", 0, 1))
			c.Job.ProcsPerHost = 2
			return c
		}(),
		want: []string{"worker-0@c gpus=", "worker-1@c gpus=", "worker-2@g gpus=0", "worker-3@g gpus=1"},
	}, {
		name:  "auto host not probed is a CPU host with a note",
		cfg:   testConfig(config.PyTorch, autoHost("a", "10.0.0.1"), gpuHost("g", "10.0.0.2", 0)),
		want:  []string{"worker-0@a gpus=", "worker-1@g gpus=0"},
		notes: []string{`a: gpus = "auto" not probed`},
	}, {
		name: "probe results replace the spec",
		cfg:  testConfig(config.PyTorch, autoHost("a", "10.0.0.1"), gpuHost("g", "10.0.0.2", 0, 1)),
		gpus: map[string]HostGPUs{"a": {Indices: []int{2, 5}, Probed: true}, "g": {Indices: []int{1}, Probed: true}},
		want: []string{"worker-0@a gpus=2", "worker-1@a gpus=5", "worker-2@g gpus=1"},
	}, {
		name:  "probed with no free GPU",
		cfg:   testConfig(config.PyTorch, autoHost("a", "10.0.0.1")),
		gpus:  map[string]HostGPUs{"a": {Probed: true}},
		want:  []string{"worker-0@a gpus="},
		notes: []string{"a: no free GPUs"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustBuild(t, PlanInput{Config: tt.cfg, GPUs: tt.gpus})
			assert.Equal(t, tt.want, placed(p))
			require.Len(t, p.Notes, len(tt.notes), "notes: %q", p.Notes)
			for i, n := range tt.notes {
				assert.Contains(t, p.Notes[i], n)
			}
			// Invariants of every pytorch plan.
			master := p.Processes[0].Address
			perHost := map[string]int{}
			for _, pr := range p.Processes {
				perHost[pr.Host.Name]++
			}
			for i, pr := range p.Processes {
				assert.Equal(t, i, pr.Rank)
				assert.Equal(t, strconv.Itoa(i), pr.Env["RANK"])
				assert.Equal(t, strconv.Itoa(len(p.Processes)), pr.Env["WORLD_SIZE"])
				assert.Equal(t, master, pr.Env["MASTER_ADDR"])
				assert.Equal(t, "29500", pr.Env["MASTER_PORT"])
				assert.Equal(t, strconv.Itoa(pr.LocalRank), pr.Env["LOCAL_RANK"])
				assert.Equal(t, strconv.Itoa(perHost[pr.Host.Name]), pr.Env["LOCAL_WORLD_SIZE"])
				assert.Equal(t, strconv.Itoa(pr.NodeRank), pr.Env["NODE_RANK"])
				assert.Equal(t, strconv.Itoa(pr.NodeRank), pr.Env["GROUP_RANK"])
				// LOCAL_RANK indexes the host's GPUs, as under torchrun.
				if len(pr.GPUs) > 0 {
					assert.Equal(t, strconv.Itoa(pr.GPUs[0]), strings.Split(pr.Env["CUDA_VISIBLE_DEVICES"], ",")[pr.LocalRank])
				}
				assert.Contains(t, pr.Env, "CUDA_VISIBLE_DEVICES", "set, empty when no GPU")
				assert.Equal(t, []string{"python3", "train.py", "--epochs", "3"}, pr.Command)
				assert.Equal(t, 0, pr.Port)
			}
		})
	}
}

func TestBuildPyTorchNodeRanks(t *testing.T) {
	c := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0, 1), spare(cpuHost("s", "10.0.0.9")), gpuHost("b", "10.0.0.2", 0, 1))
	p := mustBuild(t, PlanInput{Config: c})
	var got []string
	for _, pr := range p.Processes {
		got = append(got, pr.Env["NODE_RANK"]+"/"+pr.Env["LOCAL_RANK"])
	}
	assert.Equal(t, []string{"0/0", "0/1", "1/0", "1/1"}, got, "the spare does not take a node rank")
	assert.Len(t, p.Hosts, 2)
}

func TestBuildTensorFlowPlacement(t *testing.T) {
	withProcs := func(c *config.Config, n int) *config.Config { c.Job.ProcsPerHost = n; return c }
	tests := []struct {
		name string
		cfg  *config.Config
		want []string
	}{{
		name: "chief, 2 workers, ps on two GPU hosts: ps beside the fewest tasks",
		cfg:  tfConfig(config.Roles{Chief: 1, Worker: 2, PS: 1}, gpuHost("a", "10.0.0.1", 0, 1), gpuHost("b", "10.0.0.2", 0, 1)),
		want: []string{"chief-0@a gpus=0 port=2222", "worker-0@a gpus=1 port=2223", "worker-1@b gpus=0 port=2222", "ps-0@b gpus= port=2223"},
	}, {
		name: "mixed hosts, worker auto: ps takes the CPU slot, workers the rest",
		cfg: withProcs(tfConfig(config.Roles{Chief: 1, WorkerAuto: true, PS: 1},
			gpuHost("a", "10.0.0.1", 0, 1), cpuHost("c", "10.0.0.3")), 2),
		want: []string{"chief-0@a gpus=0 port=2222", "worker-0@a gpus=1 port=2223", "worker-1@c gpus= port=2222", "ps-0@c gpus= port=2223"},
	}, {
		name: "uneven GPUs, worker auto",
		cfg:  tfConfig(config.Roles{Chief: 1, WorkerAuto: true}, gpuHost("a", "10.0.0.1", 0, 1, 2), gpuHost("b", "10.0.0.2", 5)),
		want: []string{"chief-0@a gpus=0 port=2222", "worker-0@a gpus=1 port=2223", "worker-1@a gpus=2 port=2224", "worker-2@b gpus=5 port=2222"},
	}, {
		name: "ps and evaluator prefer the host without GPUs, even past its slots",
		cfg: tfConfig(config.Roles{Chief: 1, Worker: 1, PS: 1, Evaluator: 1},
			gpuHost("a", "10.0.0.1", 0, 1), cpuHost("c", "10.0.0.3")),
		want: []string{"chief-0@a gpus=0 port=2222", "worker-0@a gpus=1 port=2223", "ps-0@c gpus= port=2222", "evaluator-0@c gpus= port=2223"},
	}, {
		name: "workers need the CPU slot: ps runs beside them",
		cfg: tfConfig(config.Roles{Chief: 1, Worker: 2, PS: 1},
			gpuHost("a", "10.0.0.1", 0, 1), cpuHost("c", "10.0.0.3")),
		want: []string{"chief-0@a gpus=0 port=2222", "worker-0@a gpus=1 port=2223", "worker-1@c gpus= port=2222", "ps-0@c gpus= port=2223"},
	}, {
		name: "CPU-only fleet: ps spread over hosts, workers fill the rest",
		cfg: withProcs(tfConfig(config.Roles{WorkerAuto: true, PS: 2},
			cpuHost("c1", "10.0.0.1"), cpuHost("c2", "10.0.0.2")), 2),
		want: []string{"worker-0@c1 gpus= port=2222", "worker-1@c2 gpus= port=2222", "ps-0@c1 gpus= port=2223", "ps-1@c2 gpus= port=2223"},
	}, {
		name: "one CPU slot, chief and ps: ps shares the host",
		cfg:  tfConfig(config.Roles{Chief: 1, WorkerAuto: true, PS: 1}, cpuHost("c", "10.0.0.1")),
		want: []string{"chief-0@c gpus= port=2222", "ps-0@c gpus= port=2223"},
	}, {
		name: "local hosts share 127.0.0.1: ports never collide",
		cfg: tfConfig(config.Roles{Chief: 1, Worker: 1, PS: 1},
			localHost("l0", "/tmp/w0", 0), localHost("l1", "/tmp/w1", 1)),
		want: []string{"chief-0@l0 gpus=0 port=2222", "worker-0@l1 gpus=1 port=2223", "ps-0@l0 gpus= port=2224"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustBuild(t, PlanInput{Config: tt.cfg})
			assert.Equal(t, tt.want, placed(p))
			seen := map[string]bool{}
			for _, pr := range p.Processes {
				ep := joinHostPort(pr.Address, pr.Port)
				assert.False(t, seen[ep], "endpoint %s used twice", ep)
				seen[ep] = true
				assert.Equal(t, []int{-1, -1, -1}, []int{pr.Rank, pr.LocalRank, pr.NodeRank})
				assert.Equal(t, joinInts(pr.GPUs), pr.Env["CUDA_VISIBLE_DEVICES"])
				assert.NotContains(t, pr.Env, "TORCHELASTIC_RESTART_COUNT")
			}
		})
	}
}

func TestBuildTensorFlowDoesNotFit(t *testing.T) {
	tests := []struct {
		name    string
		cfg     *config.Config
		wantMsg []string
	}{{
		name:    "more workers than GPUs",
		cfg:     tfConfig(config.Roles{Chief: 1, Worker: 3}, gpuHost("a", "10.0.0.1", 0), gpuHost("b", "10.0.0.2", 0)),
		wantMsg: []string{"need 4 slots", "2 slots: 2 GPUs and 0 CPU slots", "lower worker to 1"},
	}, {
		name:    "CPU slots counted with procs_per_host",
		cfg:     tfConfig(config.Roles{Worker: 3}, gpuHost("a", "10.0.0.1", 0), cpuHost("c", "10.0.0.3")),
		wantMsg: []string{"need 3 slots", "2 slots: 1 GPUs and 1 CPU slots", "procs_per_host"},
	}, {
		name:    "two chiefs",
		cfg:     tfConfig(config.Roles{Chief: 2, Worker: 1}, gpuHost("a", "10.0.0.1", 0, 1, 2)),
		wantMsg: []string{"2 chiefs"},
	}, {
		name:    "nothing to place",
		cfg:     tfConfig(config.Roles{PS: 1}, gpuHost("a", "10.0.0.1", 0)),
		wantMsg: []string{"no chief and no worker"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(PlanInput{Config: tt.cfg})
			require.Error(t, err)
			assert.True(t, config.IsConfigError(err), "%T %v", err, err)
			var ce *config.ConfigError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, "/jobs/job.toml", ce.File)
			for _, m := range tt.wantMsg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

// TestTFConfigFormat checks TF_CONFIG against the format Kubeflow's TFJob
// operator documents, field by field.
func TestTFConfigFormat(t *testing.T) {
	c := tfConfig(config.Roles{Chief: 1, Worker: 2, PS: 1, Evaluator: 1},
		gpuHost("a", "10.0.0.1", 0, 1), gpuHost("b", "10.0.0.2", 0), cpuHost("c", "10.0.0.3"))
	p := mustBuild(t, PlanInput{Config: c})
	require.Len(t, p.Processes, 5)
	wantCluster := map[string][]string{
		"chief":     {"10.0.0.1:2222"},
		"worker":    {"10.0.0.1:2223", "10.0.0.2:2222"},
		"ps":        {"10.0.0.3:2222"},
		"evaluator": {"10.0.0.3:2223"},
	}
	for _, pr := range p.Processes {
		raw := pr.Env["TF_CONFIG"]
		var doc map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(raw), &doc), raw)
		assert.Len(t, doc, 3, "exactly cluster, task, environment: %s", raw)
		var cl map[string][]string
		require.NoError(t, json.Unmarshal(doc["cluster"], &cl))
		assert.Equal(t, wantCluster, cl)
		var task map[string]any
		require.NoError(t, json.Unmarshal(doc["task"], &task))
		assert.Equal(t, map[string]any{"type": string(pr.Role), "index": float64(pr.Index)}, task)
		var env string
		require.NoError(t, json.Unmarshal(doc["environment"], &env))
		assert.Equal(t, "cloud", env)
		// Byte layout as the operator's json.Marshal writes it: member
		// order cluster, task, environment; cluster keys sorted.
		assert.True(t, strings.HasPrefix(raw, `{"cluster":{"chief":["10.0.0.1:2222"],"evaluator":["10.0.0.3:2223"],"ps":["10.0.0.3:2222"],"worker":["10.0.0.1:2223","10.0.0.2:2222"]},"task":{"type":"`), raw)
		assert.True(t, strings.HasSuffix(raw, `,"environment":"cloud"}`), raw)
	}
	w1 := p.Processes[2]
	require.Equal(t, "worker-1", w1.Name())
	assert.Equal(t, `{"cluster":{"chief":["10.0.0.1:2222"],"evaluator":["10.0.0.3:2223"],"ps":["10.0.0.3:2222"],"worker":["10.0.0.1:2223","10.0.0.2:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}`,
		w1.Env["TF_CONFIG"])
}

func TestTFConfigAbsentRoles(t *testing.T) {
	p := mustBuild(t, PlanInput{Config: tfConfig(config.Roles{Worker: 2}, gpuHost("a", "10.0.0.1", 0, 1))})
	var doc TFConfig
	require.NoError(t, json.Unmarshal([]byte(p.Processes[0].Env["TF_CONFIG"]), &doc))
	assert.Equal(t, map[string][]string{"worker": {"10.0.0.1:2222", "10.0.0.1:2223"}}, doc.Cluster)
	assert.NotContains(t, p.Processes[0].Env["TF_CONFIG"], "chief")
	assert.NotContains(t, p.Processes[0].Env["TF_CONFIG"], `"ps"`)
}

func TestTFConfigSingleTask(t *testing.T) {
	for _, r := range []config.Roles{{Worker: 1}, {Chief: 1}, {WorkerAuto: true}} {
		p := mustBuild(t, PlanInput{Config: tfConfig(r, gpuHost("a", "10.0.0.1", 0))})
		require.Len(t, p.Processes, 1)
		assert.NotContains(t, p.Processes[0].Env, "TF_CONFIG", "%+v", r)
	}
}

func TestBuildTorchrun(t *testing.T) {
	c := testConfig(config.Torchrun, gpuHost("a", "10.0.0.1", 0, 1, 2, 3), cpuHost("c", "10.0.0.3"))
	c.Job.ProcsPerHost = 2
	p := mustBuild(t, PlanInput{Config: c, RestartCount: 2})
	require.Len(t, p.Processes, 2)
	assert.Equal(t, []string{"python3", "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "0",
		"--nproc_per_node", "4", "--master_addr", "10.0.0.1", "--master_port", "29500", "--rdzv_id", "demo", "--redirects", "2", "--tee", "2", "train.py", "--epochs", "3"},
		p.Processes[0].Command)
	assert.Equal(t, []string{"python3", "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "1",
		"--nproc_per_node", "2", "--master_addr", "10.0.0.1", "--master_port", "29500", "--rdzv_id", "demo", "--redirects", "2", "--tee", "2", "train.py", "--epochs", "3"},
		p.Processes[1].Command)
	assert.Equal(t, "node-0", p.Processes[0].Name())
	assert.Equal(t, "0,1,2,3", p.Processes[0].Env["CUDA_VISIBLE_DEVICES"])
	assert.Equal(t, "", p.Processes[1].Env["CUDA_VISIBLE_DEVICES"])
	assert.Equal(t, []int{-1, -1, 1}, []int{p.Processes[1].Rank, p.Processes[1].LocalRank, p.Processes[1].NodeRank})
	// torchrun sets TORCHELASTIC_RESTART_COUNT itself (its own count, 0
	// for every fresh torchrun): drover's count is DROVER_RESTART_COUNT.
	assert.NotContains(t, p.Processes[1].Env, "TORCHELASTIC_RESTART_COUNT")
	assert.Equal(t, "2", p.Processes[1].Env["DROVER_RESTART_COUNT"])
}

func TestTorchrunSplit(t *testing.T) {
	tests := []struct {
		cmd          []string
		prefix, rest []string
		err          string
	}{
		{cmd: []string{"python3", "train.py", "-x"}, prefix: []string{"python3", "-m", "torch.distributed.run"}, rest: []string{"train.py", "-x"}},
		{cmd: []string{"/opt/venv/bin/python3.11", "-u", "-X", "dev", "train.py"},
			prefix: []string{"/opt/venv/bin/python3.11", "-u", "-X", "dev", "-m", "torch.distributed.run"}, rest: []string{"train.py"}},
		{cmd: []string{"python", "-m", "pkg.train", "--lr", "1"}, prefix: []string{"python", "-m", "torch.distributed.run"}, rest: []string{"-m", "pkg.train", "--lr", "1"}},
		{cmd: []string{"./train.sh", "a"}, prefix: []string{"torchrun"}, rest: []string{"--no_python", "./train.sh", "a"}},
		{cmd: []string{"pythonic-tool", "a"}, prefix: []string{"torchrun"}, rest: []string{"--no_python", "pythonic-tool", "a"}},
		{cmd: []string{"python3", "-c", "print(1)"}, err: "-c"},
		{cmd: []string{"python3"}, err: "without a script"},
		{cmd: []string{"python3", "-m"}, err: "module"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.cmd, " "), func(t *testing.T) {
			prefix, rest, err := torchrunSplit(tt.cmd)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.prefix, prefix)
			assert.Equal(t, tt.rest, rest)
		})
	}
	c := testConfig(config.Torchrun, gpuHost("a", "10.0.0.1", 0))
	c.Job.Command = []string{"python3", "-c", "x"}
	_, err := Build(PlanInput{Config: c})
	assert.True(t, config.IsConfigError(err), "%v", err)
}

func TestBuildDroverEnv(t *testing.T) {
	c := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0), gpuHost("b", "10.0.0.2", 1))
	c.Hosts[1].Workdir = "/srv/b"
	c.Job.Env = map[string]string{"WANDB_PROJECT": "x", "OMP_NUM_THREADS": "4"}
	p := mustBuild(t, PlanInput{Config: c, RestartCount: 3, ResumeFrom: "/home/u/drover/demo/checkpoints/step-9",
		HostHome: map[string]string{"a": "/home/u"}})
	a, b := p.Processes[0].Env, p.Processes[1].Env
	assert.Equal(t, "demo", a["DROVER_JOB"])
	assert.Equal(t, "a", a["DROVER_HOST"])
	assert.Equal(t, "worker", a["DROVER_ROLE"])
	assert.Equal(t, "1", b["DROVER_INDEX"])
	assert.Equal(t, "3", a["DROVER_RESTART_COUNT"])
	assert.Equal(t, "3", a["TORCHELASTIC_RESTART_COUNT"])
	assert.Equal(t, "/home/u/drover/demo/checkpoints/step-9", b["DROVER_RESUME_FROM"])
	assert.Equal(t, "/home/u/drover/demo/checkpoints", a["DROVER_CHECKPOINT_DIR"])
	assert.Equal(t, "/srv/b/checkpoints", b["DROVER_CHECKPOINT_DIR"])
	assert.Equal(t, "x", b["WANDB_PROJECT"])
	assert.Equal(t, "4", a["OMP_NUM_THREADS"])
	assert.Equal(t, "drover/demo", p.Processes[0].Workdir)
	assert.Equal(t, "/srv/b", p.Processes[1].Workdir)
	assert.Equal(t, map[string]string{"WANDB_PROJECT": "x", "OMP_NUM_THREADS": "4"}, p.JobEnv)

	// A checkpoint staged per host: each process gets its own host's path.
	p = mustBuild(t, PlanInput{Config: c, ResumeFrom: "/unused",
		HostResumeFrom: map[string]string{"a": "/home/u/drover/demo/.drover/checkpoints/000003/step-9", "b": "/srv/b/checkpoints/step-9"}})
	assert.Equal(t, "/home/u/drover/demo/.drover/checkpoints/000003/step-9", p.Processes[0].Env["DROVER_RESUME_FROM"])
	assert.Equal(t, "/srv/b/checkpoints/step-9", p.Processes[1].Env["DROVER_RESUME_FROM"])

	p = mustBuild(t, PlanInput{Config: c})
	assert.Contains(t, p.Processes[0].Env, "DROVER_RESUME_FROM", "set even when empty")
	assert.Equal(t, "", p.Processes[0].Env["DROVER_RESUME_FROM"])
	assert.Equal(t, "~/drover/demo/checkpoints", p.Processes[0].Env["DROVER_CHECKPOINT_DIR"])
}

func TestCheckpointDir(t *testing.T) {
	tests := []struct{ workdir, ckpt, home, want string }{
		{"drover/j", "checkpoints", "/home/u", "/home/u/drover/j/checkpoints"},
		{"drover/j", "checkpoints", "", "~/drover/j/checkpoints"},
		{"~/drover/j", "ckpt", "/home/u", "/home/u/drover/j/ckpt"},
		{"/srv/j", "ckpt", "/home/u", "/srv/j/ckpt"},
		{"drover/j", "/data/ckpt/", "/home/u", "/data/ckpt"},
		{"drover/j", "~/ckpt", "/root", "/root/ckpt"},
		{"drover/j", "~/ckpt", "", "~/ckpt"},
		{"drover/j", "../shared", "", "~/drover/shared"},
		{"", "", "", "~"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, checkpointDir(tt.workdir, tt.ckpt, tt.home), "%+v", tt)
	}
}

func TestBuildJobEnvConflicts(t *testing.T) {
	tests := []struct {
		fw      config.Framework
		env     map[string]string
		wantKey []string // ConfigError keys, sorted by name
	}{
		{config.PyTorch, map[string]string{"RANK": "1", "MASTER_ADDR": "x", "OK": "y"}, []string{"job.env.MASTER_ADDR", "job.env.RANK"}},
		{config.Torchrun, map[string]string{"WORLD_SIZE": "8"}, []string{"job.env.WORLD_SIZE"}},
		{config.TensorFlow, map[string]string{"TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "0"}, []string{"job.env.CUDA_VISIBLE_DEVICES", "job.env.TF_CONFIG"}},
		{config.TensorFlow, map[string]string{"DROVER_ROLE": "chief"}, []string{"job.env.DROVER_ROLE"}},
		{config.PyTorch, map[string]string{"BAD-NAME": "x", "1X": "y"}, []string{"job.env.1X", "job.env.BAD-NAME"}},
		// Not drover's for this framework: allowed.
		{config.TensorFlow, map[string]string{"RANK": "0"}, nil},
		{config.PyTorch, map[string]string{"TF_CONFIG": "{}"}, nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.fw)+"/"+strings.Join(sortedKeys(tt.env), ","), func(t *testing.T) {
			c := testConfig(tt.fw, gpuHost("a", "10.0.0.1", 0, 1))
			c.Job.Roles = config.Roles{Worker: 2}
			c.Job.Env = tt.env
			p, err := Build(PlanInput{Config: c})
			if tt.wantKey == nil {
				require.NoError(t, err)
				for k, v := range tt.env {
					assert.Equal(t, v, p.Processes[0].Env[k])
				}
				return
			}
			require.Error(t, err)
			assert.True(t, config.IsConfigError(err))
			var ces config.ConfigErrors
			require.True(t, errors.As(err, &ces), "%T", err)
			var keys []string
			for _, ce := range ces {
				keys = append(keys, ce.Key)
				assert.Equal(t, "/jobs/job.toml", ce.File)
			}
			assert.Equal(t, tt.wantKey, keys)
		})
	}
}

func TestBuildConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"only spares", testConfig(config.PyTorch, spare(gpuHost("a", "10.0.0.1", 0))), "no hosts"},
		{"no command", func() *config.Config {
			c := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0))
			c.Job.Command = nil
			return c
		}(), "job.command"},
		{"unknown framework", testConfig("mxnet", gpuHost("a", "10.0.0.1", 0)), "unknown framework"},
		{"rank 0 on a local host with remote hosts", testConfig(config.PyTorch, localHost("l", "/tmp/l", 0), gpuHost("a", "10.0.0.1", 0)), "cannot reach at 127.0.0.1"},
		{"tf task on a local host with remote hosts", tfConfig(config.Roles{Worker: 2}, gpuHost("a", "10.0.0.1", 0), localHost("l", "/tmp/l", 0)), "worker-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(PlanInput{Config: tt.cfg})
			require.Error(t, err)
			assert.True(t, config.IsConfigError(err), "%T %v", err, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := Build(PlanInput{})
	assert.Error(t, err)
}

func TestBuildLocalHosts(t *testing.T) {
	c := testConfig(config.PyTorch, localHost("l0", "/tmp/w0"), localHost("l1", "/tmp/w1"))
	p := mustBuild(t, PlanInput{Config: c})
	require.Len(t, p.Processes, 2)
	for _, pr := range p.Processes {
		assert.Equal(t, "127.0.0.1", pr.Address)
		assert.Equal(t, "127.0.0.1", pr.Env["MASTER_ADDR"])
	}
	assert.Equal(t, "/tmp/w1", p.Processes[1].Workdir)
	// A remote rank 0 reachable from local hosts is fine.
	c = testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0), localHost("l", "/tmp/l", 0))
	mustBuild(t, PlanInput{Config: c})
}

func TestBuildIsPure(t *testing.T) {
	c := tfConfig(config.Roles{Chief: 1, WorkerAuto: true, PS: 1}, gpuHost("a", "10.0.0.1", 0, 1), cpuHost("c", "10.0.0.3"))
	c.Job.Env = map[string]string{"A": "1"}
	in := PlanInput{Config: c, GPUs: map[string]HostGPUs{"a": {Indices: []int{1}, Probed: true}}}
	p1 := mustBuild(t, in)
	p1.Processes[0].Env["A"] = "changed"
	p1.Processes[0].GPUs[0] = 7
	p1.JobEnv["A"] = "changed"
	p2 := mustBuild(t, in)
	assert.Equal(t, "1", c.Job.Env["A"])
	assert.Equal(t, []int{1}, in.GPUs["a"].Indices)
	assert.Equal(t, "1", p2.Processes[0].Env["A"])
	assert.Equal(t, []int{1}, p2.Processes[0].GPUs)
}

// TestBuildDataEnv: every process finds each [[data]] set's destination
// on its own host, by position and, when named, by name.
func TestBuildDataEnv(t *testing.T) {
	c := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0), gpuHost("b", "10.0.0.2", 1))
	c.Hosts[1].Workdir = "/srv/b"
	c.Data = []config.DataSet{{Name: "image-net", SourceHost: "a", Source: "/d", Dest: "data/in"}, {Source: "/l", Dest: "/scratch/tok"}}
	p := mustBuild(t, PlanInput{Config: c, HostHome: map[string]string{"a": "/home/u"}})
	a, b := p.Processes[0].Env, p.Processes[1].Env
	assert.Equal(t, "/home/u/drover/demo/data/in", a["DROVER_DATA_0"])
	assert.Equal(t, "/home/u/drover/demo/data/in", a["DROVER_DATA_IMAGE_NET"])
	assert.Equal(t, "/srv/b/data/in", b["DROVER_DATA_IMAGE_NET"])
	assert.Equal(t, "/scratch/tok", b["DROVER_DATA_1"])
	assert.NotContains(t, b, "DROVER_DATA_")
}
