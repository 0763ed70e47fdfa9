package plan

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/droverhq/drover/cluster/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// containerPlan is the pytorch fixture (gpu-a with GPUs 0 and 1, gpu-b
// probed with GPU 3) run in container c, in a run whose hosts' homes are
// known, as drover run builds it.
func containerPlan(t *testing.T, c config.Container, ckpt string) *Plan {
	t.Helper()
	cfg := goldenConfig(t, "pytorch")
	cfg.Job.Container = c
	if ckpt != "" {
		cfg.Job.CheckpointDir = ckpt
	}
	return mustBuild(t, PlanInput{Config: cfg, RunID: goldenRunID, Attempt: 2,
		GPUs:     map[string]HostGPUs{"gpu-b": {Indices: []int{3}, Probed: true}},
		HostHome: map[string]string{"gpu-a": "/home/u", "gpu-b": "/home/u"}})
}

func goldenConfig(t *testing.T, name string) *config.Config {
	t.Helper()
	c, err := config.Load("testdata/"+name+".toml", config.LoadOptions{})
	require.NoError(t, err)
	return c
}

// TestContainerGolden pins each runtime's run command for every process,
// one argument a line.
func TestContainerGolden(t *testing.T) {
	for _, c := range []config.Container{
		{Image: "docker-archive:/srv/img.tar", Runtime: config.RuntimePodman, Options: []string{"--shm-size=1g"}},
		{Image: "nvcr.io/nvidia/pytorch:24.05-py3", Runtime: config.RuntimeDocker},
		{Image: "/shared/pt.sif", Runtime: config.RuntimeApptainer},
	} {
		t.Run(string(c.Runtime), func(t *testing.T) {
			var b strings.Builder
			for _, pr := range containerPlan(t, c, "/scratch/ckpt").Processes {
				fmt.Fprintf(&b, "# %s@%s container=%q\n", pr.Name(), pr.Host.Name, pr.Container)
				for _, a := range pr.Command {
					fmt.Fprintf(&b, "%s\n", a)
				}
			}
			checkGolden(t, "container-"+string(c.Runtime), []byte(b.String()))
		})
	}
}

// TestContainerWrap: what each runtime's command must and must not hold.
func TestContainerWrap(t *testing.T) {
	podman := config.Container{Image: "docker-archive:/srv/img.tar", Runtime: config.RuntimePodman}
	docker := config.Container{Image: "pt:1", Runtime: config.RuntimeDocker}
	app := config.Container{Image: "/shared/pt.sif", Runtime: config.RuntimeApptainer}
	for _, tc := range []struct {
		name    string
		c       config.Container
		ckpt    string
		proc    int // index in the plan
		has     [][]string
		hasNot  []string
		wantCtr string
	}{
		{name: "podman: host network and IPC, keep-id, the workdir at its own path", c: podman, proc: 0,
			has: [][]string{{"podman", "run", "--rm", "--name"}, {"--network", "host", "--ipc", "host"}, {"--userns=keep-id"},
				{"--volume", "/home/u/drover/demo:/home/u/drover/demo", "--workdir", "/home/u/drover/demo"},
				{"--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"},
				{"--env", "CUDA_VISIBLE_DEVICES=0,1"}, {"--env", "RANK"}, {"--env", "MASTER_ADDR"}, {"--env", "HF_TOKEN"},
				{"--label", "drover.workdir=/home/u/drover/demo"}, {"--label", "drover.run=" + goldenRunID},
				{"localhost/drover-archive:", "python3", "train.py", "--epochs", "3"}},
			hasNot: []string{"hf_abc123", "/scratch"}, wantCtr: "drover-resnet-" + goldenRunID + "-a2-worker-0"},
		{name: "podman: a probed GPU keeps its index outside, 0 inside", c: podman, proc: 2,
			has:     [][]string{{"--device", "nvidia.com/gpu=3", "--env"}, {"--env", "CUDA_VISIBLE_DEVICES=0"}},
			wantCtr: "drover-resnet-" + goldenRunID + "-a2-worker-2"},
		{name: "podman: a checkpoint dir outside the workdir is mounted", c: podman, ckpt: "/scratch/ckpt", proc: 0,
			has: [][]string{{"--volume", "/scratch/ckpt:/scratch/ckpt"}}, wantCtr: "drover-resnet-" + goldenRunID + "-a2-worker-0"},
		{name: "docker: --gpus, the user's ids from the host's shell", c: docker, proc: 1,
			has: [][]string{{"sh", "-c", `exec docker run --user "$(id -u):$(id -g)" "$@"`, "docker", "--rm"},
				{"--gpus", `"device=0,1"`}, {"pt:1", "python3", "train.py"}},
			hasNot: []string{"hf_abc123", "--userns=keep-id"}, wantCtr: "drover-resnet-" + goldenRunID + "-a2-worker-1"},
		{name: "apptainer: --nv, the host's numbering, env inherited", c: app, proc: 2,
			has:    [][]string{{"apptainer", "exec", "--bind", "/home/u/drover/demo", "--pwd", "/home/u/drover/demo", "--nv", "/shared/pt.sif", "python3"}},
			hasNot: []string{"hf_abc123", "--env", "--name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := containerPlan(t, tc.c, tc.ckpt).Processes[tc.proc]
			for _, seq := range tc.has {
				assert.True(t, hasRun(pr.Command, seq), "%q not in %q", seq, pr.Command)
			}
			for _, s := range tc.hasNot {
				assert.NotContains(t, strings.Join(pr.Command, "\x00"), s)
			}
			assert.Equal(t, tc.wantCtr, pr.Container)
			if tc.c.Runtime == config.RuntimeApptainer {
				assert.Equal(t, "3", pr.Env["CUDA_VISIBLE_DEVICES"], "apptainer --nv shows every GPU: the host's index picks the process's")
			}
		})
	}
}

// TestContainerNone: without container the command is the job's own.
func TestContainerNone(t *testing.T) {
	pr := containerPlan(t, config.Container{}, "").Processes[0]
	assert.Equal(t, []string{"python3", "train.py", "--epochs", "3"}, pr.Command)
	assert.Empty(t, pr.Container)
}

// TestContainerDockerScript runs the docker wrapper's script in a real
// shell with a stand-in docker that prints its argv: --user comes first
// with the caller's ids, then every option, the image and the command
// unchanged, however they are quoted.
func TestContainerDockerScript(t *testing.T) {
	dir := t.TempDir()
	writeExec(t, dir+"/docker", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n")
	argv := containerPlan(t, config.Container{Image: "pt:1", Runtime: config.RuntimeDocker, Options: []string{"--shm-size=1g"}}, "").Processes[0].Command
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	require.NoError(t, err)
	id := func(flag string) string {
		b, err := exec.Command("id", flag).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	want := append([]string{"run", "--user", id("-u") + ":" + id("-g")}, argv[4:]...)
	assert.Equal(t, want, strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"))
}

// hasRun reports whether seq occurs in argv as consecutive elements; an
// element of seq ending in ':' matches as a prefix.
func hasRun(argv, seq []string) bool {
	for i := 0; i+len(seq) <= len(argv); i++ {
		ok := true
		for j, s := range seq {
			a := argv[i+j]
			if a != s && !(strings.HasSuffix(s, ":") && strings.HasPrefix(a, s)) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func writeExec(t *testing.T, file, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(file, []byte(text), 0o755))
}
