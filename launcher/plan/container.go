package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// Labels drover puts on each container it starts, so that it finds its
// own again: the job, the run, and the workdir, whose containers left
// behind by an agent that was killed are removed at the next start there
// (OrphanFilter).
const (
	LabelJob     = "drover.job"
	LabelRun     = "drover.run"
	LabelWorkdir = "drover.workdir"
)

// OrphanFilter is the runtime's `ps --filter` argument that finds the
// containers drover started from workdir (absolute, as in the plan): the
// only containers drover ever removes unasked.
func OrphanFilter(workdir string) string { return "label=" + LabelWorkdir + "=" + workdir }

// ContainerName is the name of pr's container in attempt attempt of run
// runID: job, run, attempt and process, so that one attempt's container
// never clashes with the next one's while it is still being removed, and
// a user's `podman ps` says whose it is. Runtimes allow [a-zA-Z0-9_.-],
// which job names (config's nameRE), run ids and process names keep to.
func ContainerName(job, runID string, attempt int, pr Process) string {
	parts := []string{"drover", job}
	if runID != "" {
		parts = append(parts, runID)
	}
	if attempt > 0 {
		parts = append(parts, "a"+strconv.Itoa(attempt))
	}
	return strings.Join(append(parts, pr.Name()), "-")
}

// wrapContainers wraps every process's command in the job's container
// runtime's run command, when the job has a container; it runs last, on
// the complete environment, which the run command passes on by name.
func wrapContainers(p *Plan, in PlanInput) {
	c := in.Config.Job.Container
	if !c.Set() {
		return
	}
	for i := range p.Processes {
		pr := &p.Processes[i]
		home := in.HostHome[pr.Host.Name]
		wd := checkpointDir(pr.Workdir, ".", home)
		ckpt := checkpointDir(pr.Workdir, in.Config.Job.CheckpointDir, home)
		switch c.Runtime {
		case config.RuntimeApptainer:
			pr.Command = apptainerArgv(c, *pr, wd, ckpt)
		default:
			pr.Container = ContainerName(in.Config.Job.Name, in.RunID, in.Attempt, *pr)
			pr.Command = engineArgv(c, *pr, in, wd, ckpt)
		}
	}
}

// engineArgv is docker's or podman's run command for pr. Values of the
// environment are not in it: `--env NAME` passes the variable drover sets
// on the runtime's own process, so no secret of [job.env] shows in `ps`.
// The exception is CUDA_VISIBLE_DEVICES: the container sees only the
// GPUs it is given, numbered from 0 in the same order, so the list is
// renumbered (LOCAL_RANK still indexes it as on the host).
func engineArgv(c config.Container, pr Process, in PlanInput, wd, ckpt string) []string {
	rt := string(c.Runtime)
	argv := []string{rt, "run", "--rm", "--name", pr.Container,
		"--label", LabelJob + "=" + in.Config.Job.Name,
		"--label", LabelWorkdir + "=" + wd,
	}
	if in.RunID != "" {
		argv = append(argv, "--label", LabelRun+"="+in.RunID)
	}
	argv = append(argv, "--network", "host", "--ipc", "host", "--init")
	if c.Runtime == config.RuntimePodman {
		// The login user's uid inside as outside, so that what the
		// process writes in the workdir is the user's; podman forwards
		// the signals it gets to the process (--sig-proxy, its default).
		argv = append(argv, "--userns=keep-id")
	}
	argv = append(argv, mounts(wd, ckpt)...)
	argv = append(argv, gpuArgs(c.Runtime, pr.Visible)...)
	for _, k := range sortedKeys(pr.Env) {
		if k == "CUDA_VISIBLE_DEVICES" {
			argv = append(argv, "--env", k+"="+renumbered(len(pr.Visible)))
			continue
		}
		argv = append(argv, "--env", k)
	}
	argv = append(argv, c.Options...)
	argv = append(argv, ImageRef(c))
	argv = append(argv, pr.Command...)
	if c.Runtime == config.RuntimeDocker {
		// docker has no keep-id: the login user's uid and gid, which a
		// pure plan does not know, come from the host's shell at start.
		argv = append([]string{"sh", "-c", `exec docker run --user "$(id -u):$(id -g)" "$@"`, "docker"}, argv[2:]...)
	}
	return argv
}

// apptainerArgv is apptainer's exec command for pr. apptainer shares the
// host's network, IPC and user by design, and passes the environment on
// as it is; --nv gives the host's GPUs, of which CUDA_VISIBLE_DEVICES
// (the host's numbering) picks the process's.
func apptainerArgv(c config.Container, pr Process, wd, ckpt string) []string {
	argv := []string{"apptainer", "exec", "--bind", wd, "--pwd", wd}
	if ckpt != wd && !within(ckpt, wd) {
		argv = append(argv, "--bind", ckpt)
	}
	if len(pr.Visible) > 0 {
		argv = append(argv, "--nv")
	}
	argv = append(argv, c.Options...)
	argv = append(argv, c.Image)
	return append(argv, pr.Command...)
}

// mounts bind-mounts the workdir, and the checkpoint directory when it is
// outside it, at their own paths, and makes the workdir the working
// directory: paths drover hands the process (DROVER_CHECKPOINT_DIR,
// DROVER_PROGRESS_FILE) mean the same inside.
func mounts(wd, ckpt string) []string {
	m := []string{"--volume", wd + ":" + wd, "--workdir", wd}
	if ckpt != wd && !within(ckpt, wd) {
		m = append(m, "--volume", ckpt+":"+ckpt)
	}
	return m
}

// gpuArgs gives the container the GPUs drover chose for the process:
// docker's --gpus, podman's CDI devices (nvidia-ctk cdi generate names
// them nvidia.com/gpu=INDEX).
func gpuArgs(rt config.ContainerRuntime, gpus []int) []string {
	if len(gpus) == 0 {
		return nil
	}
	if rt == config.RuntimeDocker {
		return []string{"--gpus", `"device=` + joinInts(gpus) + `"`}
	}
	var a []string
	for _, g := range gpus {
		a = append(a, "--device", "nvidia.com/gpu="+strconv.Itoa(g))
	}
	return a
}

// ImageRef is the image the run command names: Image itself, or for a
// "docker-archive:PATH" the tag the archive is given when a host loads it
// before the first attempt, one per archive path.
func ImageRef(c config.Container) string {
	p, ok := strings.CutPrefix(c.Image, config.ArchivePrefix)
	if !ok || c.Runtime == config.RuntimeApptainer {
		return c.Image
	}
	sum := sha256.Sum256([]byte(p))
	return "localhost/drover-archive:" + hex.EncodeToString(sum[:6])
}

// renumbered is "0,1,...,n-1".
func renumbered(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return strings.Join(s, ",")
}

// within reports whether p is strictly inside dir.
func within(p, dir string) bool {
	return strings.HasPrefix(path.Clean(p), path.Clean(dir)+"/")
}
