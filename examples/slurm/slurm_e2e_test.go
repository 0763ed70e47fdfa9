// Package slurm_test runs examples/pytorch-ddp on a real Slurm cluster
// (internal/fleettest/slurmtest: munged, slurmctld and a slurmd per test-fleet
// namespace) the way a team that moved from a hand-run fleet would: the
// same job file, handed to `drover submit`. A worker SIGKILLed after the
// first checkpoint must be restarted inside the allocation and end with
// bit-for-bit the parameters of an undisturbed run; scancel must leave no
// training process on any node.
//
// It needs root, Slurm, munge and a /usr/bin/python3 that imports torch;
// without them it skips, except under CI=true, where it fails.
package slurm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/fleettest/slurmtest"
	"github.com/droverhq/drover/internal/testenv"
)

const (
	nodes       = 3
	procsPerHst = 2
	trainSteps  = 40
	ckptEvery   = 10
	stepSleep   = "0.1"

	jobTimeout        = 240 * time.Second
	checkpointTimeout = 150 * time.Second
	leftoverTimeout   = 30 * time.Second
)

var (
	sl        *slurmtest.Cluster
	droverBin string
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if !slices.Contains(os.Args, "-test.short=true") && os.Getenv("DROVER_SKIP_BUILD") == "" {
		dir, err := os.MkdirTemp("", "drover-slurm-e2e-bin-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "slurm e2e: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "slurm e2e: %v\n", err)
			return 1
		}
		bin, err := fleettest.BuildDrover(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "slurm e2e: %v\n", err)
			return 1
		}
		droverBin = bin
	}
	return slurmtest.Main(m, slurmtest.Options{Name: "se", N: nodes, Subnet: 26}, &sl)
}

func need(t *testing.T) {
	t.Helper()
	slurmtest.Need(t, sl)
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput(); err != nil {
		testenv.Need(t, "python3 with torch", fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
	}
	require.NotEmpty(t, droverBin, "drover was not built")
}

// job is one submission of examples/pytorch-ddp.
type job struct {
	dir     string // job.toml, runs/, slurm-*.out
	workdir string // absolute, on the filesystem every node shares
	name    string
	id      string // Slurm job id once submitted
}

// newJob writes a job file as a hand-run fleet has it, [[host]] tables
// and all: drover submit runs it on the allocation's nodes instead.
func newJob(t *testing.T) *job { return newFrameworkJob(t, "pytorch") }

// newFrameworkJob is newJob with drover's pytorch or torchrun layout.
func newFrameworkJob(t *testing.T, framework string) *job {
	t.Helper()
	code, err := filepath.Abs("../pytorch-ddp")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	j := &job{dir: dir, workdir: filepath.Join(dir, "work"), name: "ddp"}
	body := fmt.Sprintf(`[job]
name = %q
framework = %q
command = ["python3", "train.py", "--steps", "%d", "--ckpt-every", "%d", "--sleep-per-step", %q]
code = %q
workdir = %q
checkpoint_dir = "checkpoints"
max_restarts = 2
procs_per_host = %d
restart_backoff = "1s"
stop_grace = "3s"
exclude = ["runs/", "__pycache__/"]

[job.env]
OMP_NUM_THREADS = "1"

[slurm]
nodes = %d
time = "10:00"
requeue = true

[[host]]
name = "gpu-a"
address = "10.0.0.11"
gpus = "auto"
`, j.name, framework, trainSteps, ckptEvery, stepSleep, code, j.workdir, procsPerHst, nodes)
	require.NoError(t, os.WriteFile(j.path(), []byte(body), 0o644))
	return j
}

func (j *job) path() string { return filepath.Join(j.dir, "job.toml") }

// submit runs `drover submit` and returns the job id it printed; the job is
// cancelled if the test ends first.
func (j *job) submit(t *testing.T) {
	t.Helper()
	cmd := exec.Command(droverBin, "submit", "--partition", sl.Partition, j.path())
	cmd.Dir = j.dir
	// sbatch passes this environment on to the allocation: the python3
	// found first must be the one with torch, as on the nodes of a real
	// cluster after `module load pytorch`.
	cmd.Env = append(os.Environ(), sl.Env()...)
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:"+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "drover submit: %s", errb.String())
	j.id = strings.TrimSpace(out.String())
	require.Regexp(t, `^[0-9]+$`, j.id, "drover submit prints the job id")
	t.Cleanup(func() { _, _ = sl.Output(context.Background(), "scancel", j.id) })
}

// wait waits until Slurm no longer lists the job.
func (j *job) wait(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	if err := sl.WaitState(ctx, j.id, ""); err != nil {
		t.Fatalf("%v; batch output:\n%s", err, j.batchOutput())
	}
}

// requeue requeues the job by hand, as Slurm does after a node failure or
// a preemption, and lets it start again two seconds later rather than
// after Slurm's own delay (its begin time, about two minutes). Not sooner:
// the requeue revokes the job's credential as of that second, and a batch
// launched in the same second is killed ("Job credential revoked").
func (j *job) requeue(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	_, err := sl.Output(ctx, "scontrol", "requeue", j.id)
	require.NoError(t, err, "batch output:\n%s", j.batchOutput())
	require.NoError(t, sl.WaitState(ctx, j.id, "PENDING"))
	_, err = sl.Output(ctx, "scontrol", "update", "JobId="+j.id, "StartTime=now+2")
	require.NoError(t, err)
}

func (j *job) batchOutput() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, fmt.Sprintf("slurm-%s-%s.out", j.name, j.id)))
	return string(b)
}

// runDir is the one runs/<job>-<start> directory.
func (j *job) runDir(t *testing.T) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(j.dir, "runs", j.name+"-*"))
	require.NoError(t, err)
	var out []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	require.Len(t, out, 1, "run directories; batch output:\n%s", j.batchOutput())
	return out[0]
}

func (j *job) attempts(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(j.runDir(t), "attempt-*"))
	require.NoError(t, err)
	for i := range dirs {
		dirs[i] = filepath.Base(dirs[i])
	}
	slices.Sort(dirs)
	return dirs
}

func (j *job) log(t *testing.T, attempt, proc string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(j.runDir(t), attempt, proc+".log"))
	require.NoError(t, err, "batch output:\n%s", j.batchOutput())
	return string(b)
}

func (j *job) waitCheckpoint(t *testing.T) {
	t.Helper()
	testenv.Wait(t, checkpointTimeout, "a checkpoint in "+j.workdir, func() (bool, string) {
		names, _ := filepath.Glob(filepath.Join(j.workdir, "checkpoints", "step-*.pt"))
		return len(names) > 0, "batch output:\n" + j.batchOutput()
	})
}

var (
	finalRE   = regexp.MustCompile(`(?m)final loss=[0-9.eE+-]+ params_sha256=([0-9a-f]{64})$`)
	resumedRE = regexp.MustCompile(`(?m)resumed from (\S+) at step ([0-9]+)$`)
)

func finalHash(t *testing.T, log string) string {
	t.Helper()
	m := finalRE.FindAllStringSubmatch(log, -1)
	require.Len(t, m, 1, "want one final line in:\n%s", log)
	return m[0][1]
}

// proc is a process on a node, as the test sees it from outside.
type proc struct {
	pid  int
	argv []string
	env  []string
}

func (p proc) isTrainer() bool {
	return len(p.argv) > 1 && strings.HasPrefix(filepath.Base(p.argv[0]), "python") && slices.Contains(p.argv, "train.py")
}

// nodeProcs lists the processes in node i's namespace.
func nodeProcs(t *testing.T, i int) []proc {
	t.Helper()
	pids, err := sl.Fleet.Pids(i)
	require.NoError(t, err)
	var out []proc
	for _, pid := range pids {
		cmdline, err1 := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, err2 := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err1 != nil || err2 != nil {
			continue // gone meanwhile
		}
		out = append(out, proc{pid: pid,
			argv: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"),
			env:  strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")})
	}
	return out
}

// findRank waits for the trainer of rank on node i.
func findRank(t *testing.T, i, rank int) proc {
	t.Helper()
	want := "RANK=" + strconv.Itoa(rank)
	var found proc
	// The bound is the 100 looks 0.2 s apart this was.
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("a trainer with %s on %s", want, sl.Nodes[i]), func() bool {
		for _, p := range nodeProcs(t, i) {
			if p.isTrainer() && slices.Contains(p.env, want) {
				found = p
				return true
			}
		}
		return false
	})
	return found
}

// assertNoTrainers: nothing of the job runs on any node.
func assertNoTrainers(t *testing.T) {
	t.Helper()
	testenv.Wait(t, leftoverTimeout, "no process of the job left on the nodes after the job ended", func() (bool, string) {
		var left []string
		for i := range nodes {
			for _, p := range nodeProcs(t, i) {
				if slices.Contains(p.argv, "train.py") {
					left = append(left, fmt.Sprintf("%s: %d %q", sl.Nodes[i], p.pid, p.argv))
				}
			}
		}
		return len(left) == 0, "\n" + strings.Join(left, "\n")
	})
}

// TestSubmitTraining: undisturbed, then with a worker SIGKILLed after the
// first checkpoint (restarted inside the allocation, resumed, same final
// parameters), then cancelled with scancel (nothing left on any node).
func TestSubmitTraining(t *testing.T) {
	need(t)
	var ref string
	t.Run("undisturbed", func(t *testing.T) {
		j := newJob(t)
		j.submit(t)
		j.wait(t)
		require.Equal(t, []string{"attempt-1"}, j.attempts(t), "batch output:\n%s", j.batchOutput())
		ref = finalHash(t, j.log(t, "attempt-1", "worker-0"))
		// Ranks ran on every node of the allocation, two per node.
		for rank := range nodes * procsPerHst {
			assert.Regexp(t, fmt.Sprintf(`(?m)^rank %d/6 local_rank %d on %s restart=0$`, rank, rank%procsPerHst, sl.Nodes[rank/procsPerHst]),
				j.log(t, "attempt-1", fmt.Sprintf("worker-%d", rank)))
		}
		assertNoTrainers(t)
		t.Logf("params_sha256=%s", ref)
	})
	t.Run("torchrun", func(t *testing.T) {
		if ref == "" {
			t.Skip("needs the undisturbed run's parameters")
		}
		// One torchrun step per node, which spawns the node's two workers.
		j := newFrameworkJob(t, "torchrun")
		j.submit(t)
		j.wait(t)
		require.Equal(t, []string{"attempt-1"}, j.attempts(t), "batch output:\n%s", j.batchOutput())
		assert.Equal(t, ref, finalHash(t, j.log(t, "attempt-1", "node-0")), "torchrun and pytorch runs disagree")
		assertNoTrainers(t)
	})
	t.Run("killed-worker", func(t *testing.T) {
		if ref == "" {
			t.Skip("needs the undisturbed run's parameters")
		}
		j := newJob(t)
		j.submit(t)
		j.waitCheckpoint(t)
		p := findRank(t, 1, 3)
		t.Logf("kill -9 %d on %s: %q", p.pid, sl.Nodes[1], p.argv)
		require.NoError(t, syscall.Kill(p.pid, syscall.SIGKILL))
		j.wait(t)
		require.Equal(t, []string{"attempt-1", "attempt-2"}, j.attempts(t), "batch output:\n%s", j.batchOutput())
		second := j.log(t, "attempt-2", "worker-0")
		m := resumedRE.FindStringSubmatch(second)
		require.NotNil(t, m, "attempt 2 did not resume:\n%s", second)
		assert.Equal(t, ref, finalHash(t, second), "parameters after a restart from step %s differ from an undisturbed run's", m[2])
		assert.Regexp(t, `(?m)^rank 3/6 local_rank 1 on `+sl.Nodes[1]+` restart=1$`, j.log(t, "attempt-2", "worker-3"))
		events, err := os.ReadFile(filepath.Join(j.runDir(t), "events.log"))
		require.NoError(t, err)
		assert.Contains(t, string(events), "attempt 1/3: worker-3@"+sl.Nodes[1]+" exited 137 (SIGKILL)")
		if testing.Verbose() {
			t.Logf("drover's events:\n%s", events)
		}
		assertNoTrainers(t)
	})
	t.Run("requeued", func(t *testing.T) {
		if ref == "" {
			t.Skip("needs the undisturbed run's parameters")
		}
		// Slurm requeues the job (here by hand, as after a node failure or
		// a preemption): the new allocation's drover resumes from the
		// newest checkpoint and counts on from SLURM_RESTART_COUNT.
		j := newJob(t)
		j.submit(t)
		j.waitCheckpoint(t)
		findRank(t, 2, 5)
		j.requeue(t)
		ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
		defer cancel()
		require.NoError(t, sl.WaitState(ctx, j.id, "RUNNING"))
		j.wait(t)
		runs, err := filepath.Glob(filepath.Join(j.dir, "runs", j.name+"-*"))
		require.NoError(t, err)
		require.Len(t, runs, 2, "one drover run per allocation; batch output:\n%s", j.batchOutput())
		slices.Sort(runs)
		b, err := os.ReadFile(filepath.Join(runs[1], "attempt-1", "worker-0.log"))
		require.NoError(t, err)
		second := string(b)
		assert.Regexp(t, resumedRE, second)
		assert.Regexp(t, `(?m)^rank 0/6 local_rank 0 on `+sl.Nodes[0]+` restart=1$`, second, "DROVER_RESTART_COUNT continues across the requeue")
		assert.Equal(t, ref, finalHash(t, second))
		assertNoTrainers(t)
	})
	t.Run("interrupted", func(t *testing.T) {
		// Ctrl-C to drover run inside the allocation: SIGINT to the batch
		// script, which is drover itself.
		j := newJob(t)
		j.submit(t)
		j.waitCheckpoint(t)
		findRank(t, 2, 5)
		_, err := sl.Output(context.Background(), "scancel", "--batch", "--signal=INT", j.id)
		require.NoError(t, err)
		j.wait(t)
		assertNoTrainers(t)
		assert.Contains(t, j.batchOutput(), "interrupted")
	})
	t.Run("scancel", func(t *testing.T) {
		j := newJob(t)
		j.submit(t)
		j.waitCheckpoint(t)
		findRank(t, 2, 5)
		_, err := sl.Output(context.Background(), "scancel", j.id)
		require.NoError(t, err)
		j.wait(t)
		assertNoTrainers(t)
	})
}

// TestPlanInAllocation: inside a real allocation (a batch script, where
// drover submit runs drover run), drover plans the allocation's nodes
// exactly as it plans the same nodes given as an inventory.
func TestPlanInAllocation(t *testing.T) {
	need(t)
	j := newJob(t)
	inv := filepath.Join(j.dir, "nodes.toml")
	var b strings.Builder
	for _, n := range sl.Nodes {
		fmt.Fprintf(&b, "[[host]]\nname = %q\naddress = %q\ngpus = []\n", n, n)
	}
	require.NoError(t, os.WriteFile(inv, []byte(b.String()), 0o644))
	run := func(args ...string) string {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = j.dir
		cmd.Env = append(os.Environ(), sl.Env()...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "%q: %s", args, errb.String())
		return out.String()
	}
	want := run(droverBin, "plan", "--format", "json", "--inventory", inv, j.path())
	planned := filepath.Join(j.dir, "plan.json")
	run("sbatch", "--wait", "--nodes="+strconv.Itoa(nodes), "--output="+planned,
		"--wrap="+droverBin+" plan --format json --inventory slurm "+j.path())
	got, err := os.ReadFile(planned)
	require.NoError(t, err)
	assert.Equal(t, want, string(got))
	assert.Contains(t, string(got), `"MASTER_ADDR": "`+sl.Nodes[0]+`"`)
	assert.Contains(t, string(got), `"WORLD_SIZE": "6"`)
}

// TestRunInAllocationInterrupted: drover run typed into an salloc shell
// (the allocation's variables set, drover on the login node) trains on
// the allocation's nodes; Ctrl-C stops it with nothing left on any node.
func TestRunInAllocationInterrupted(t *testing.T) {
	need(t)
	j := newJob(t)
	id := sl.Allocate(t, nodes)
	list, err := sl.Output(context.Background(), "squeue", "--noheader", "--jobs="+id, "--format=%N")
	require.NoError(t, err)
	cmd := exec.Command(droverBin, "run", "--quiet", "--inventory", "slurm", j.path())
	cmd.Dir = j.dir
	cmd.Env = append(os.Environ(), sl.Env()...)
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:"+os.Getenv("PATH"), "SLURM_JOB_ID="+id, "SLURM_JOB_NODELIST="+strings.TrimSpace(list))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	j.waitCheckpoint(t)
	findRank(t, 2, 5)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "output:\n%s", out.String())
		assert.Equal(t, 130, ee.ExitCode(), "output:\n%s", out.String())
	case <-time.After(jobTimeout):
		t.Fatalf("drover did not stop within %s of Ctrl-C; output:\n%s", jobTimeout, out.String())
	}
	assertNoTrainers(t)
	// The allocation is still there: drover stopped its steps, not the job.
	require.NoError(t, sl.WaitState(context.Background(), id, "RUNNING"))
	testenv.Wait(t, leftoverTimeout, "no step of drover's left in job "+id, func() (bool, string) {
		steps, err := sl.Output(context.Background(), "squeue", "--steps", "--noheader", "--jobs="+id, "--format=%i")
		if err == nil && strings.TrimSpace(strings.ReplaceAll(steps, id+".batch", "")) == "" {
			return true, ""
		}
		// What each step runs, to name what drover left.
		named, _ := sl.Output(context.Background(), "squeue", "--steps", "--noheader", "--jobs="+id, "--format=%i %j %M")
		return false, fmt.Sprintf("%q, %v", named, err)
	})
}

// TestExecInAllocation: drover exec fans a command out over the
// allocation's nodes with srun steps, each line labelled with its node.
func TestExecInAllocation(t *testing.T) {
	need(t)
	j := newJob(t)
	id := sl.Allocate(t, nodes)
	list, err := sl.Output(context.Background(), "squeue", "--noheader", "--jobs="+id, "--format=%N")
	require.NoError(t, err)
	cmd := exec.Command(droverBin, "exec", "--inventory", "slurm", j.path(), "--", "sh", "-c", `echo "$(hostname) step $SLURM_STEP_ID"; exit $1`, "sh", "3")
	cmd.Dir = j.dir
	cmd.Env = append(os.Environ(), sl.Env()...)
	cmd.Env = append(cmd.Env, "SLURM_JOB_ID="+id, "SLURM_JOB_NODELIST="+strings.TrimSpace(list))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	assert.Equal(t, 3, ee.ExitCode(), "the worst node's status")
	for _, n := range sl.Nodes {
		assert.Regexp(t, `(?m)^\[`+n+`\] `+n+` step [0-9]+$`, out.String())
	}
}
