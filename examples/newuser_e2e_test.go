package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file run a public script as a new user would (the DDP
// tutorial, testdata/newuser/ddp_tutorial.py, with print()) on the fleet,
// and check what issue 31 found wrong: late output, torchrun's dead worker
// seen 300 s late and misnamed, a desync with no event, a rank outliving
// its SIGKILLed agent.

// newUserScript is the tutorial script's name, in every process's argv.
const newUserScript = "ddp_tutorial.py"

// newUserJob writes a job running ddp_tutorial.py with args on the first
// hosts hosts of the fleet, two ranks (or workers) each, and returns its
// directory. extra holds more [job] lines.
func newUserJob(t *testing.T, framework string, hosts int, args []string, extra ...string) string {
	t.Helper()
	code, err := filepath.Abs(filepath.Join("testdata", "newuser"))
	require.NoError(t, err)
	dir := t.TempDir()
	name := "newuser-" + framework
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = %q\nframework = %q\ncommand = %s\ncode = %q\n", name, framework,
		tomlList(append([]string{hostPython, newUserScript}, args...)), code)
	fmt.Fprintf(&b, "workdir = %q\nprocs_per_host = 2\nstop_grace = \"2s\"\nrestart_backoff = \"1s\"\nmaster_port = 29541\nexclude = [\"__pycache__/\"]\n%s\n",
		fmt.Sprintf("e2e/%s-%d", strings.NewReplacer("/", "-").Replace(t.Name()), time.Now().UnixNano()), strings.Join(extra, "\n"))
	fmt.Fprintf(&b, "\n[job.env]\nOMP_NUM_THREADS = \"1\"\n")
	fmt.Fprintf(&b, "\n[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for _, h := range fleet.ClusterHosts()[:hosts] {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\n", h.Name, h.Address)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job.toml"), []byte(b.String()), 0o644))
	return dir
}

// tutorialWorker finds the python running the tutorial with RANK=rank and
// DROVER_RESTART_COUNT=restart on host i (under torchrun, torchrun's
// worker, not torchrun itself), polling until it appears or until drover
// exits.
func tutorialWorker(t *testing.T, r *droverRun, host, rank, restart int) procInfo {
	t.Helper()
	want := []string{"RANK=" + strconv.Itoa(rank), "DROVER_RESTART_COUNT=" + strconv.Itoa(restart)}
	var found procInfo
	testenv.Wait(t, runTimeout, fmt.Sprintf("%s with %v on %s", newUserScript, want, fleet.Hosts[host].Name), func() (bool, string) {
		if r.finished() {
			t.Fatalf("drover exited before %s with %v ran on %s; output:\n%s", newUserScript, want, fleet.Hosts[host].Name, r.output())
		}
		for _, p := range hostProcs(t, host) {
			// torchrun starts its workers as `python -u SCRIPT ...`.
			if strings.HasPrefix(filepath.Base(p.argv[0]), "python") && slices.Contains(p.argv, newUserScript) &&
				!slices.Contains(p.argv, "torch.distributed.run") && !slices.Contains(p.argv, "-c") &&
				slices.Contains(p.env, want[0]) && slices.Contains(p.env, want[1]) {
				found = p
				return true, ""
			}
		}
		return false, "output:\n" + r.output()
	})
	return found
}

// jobProcs lists what of the job runs on the first hosts hosts: anything
// whose argv names the script or its child.
func jobProcs(t *testing.T, hosts int) []string {
	t.Helper()
	var left []string
	for i := range hosts {
		for _, p := range hostProcs(t, i) {
			if slices.Contains(p.argv, newUserScript) || slices.Contains(p.argv, "newuser-child") {
				left = append(left, fmt.Sprintf("%s: %d %q", fleet.Hosts[i].Name, p.pid, p.argv))
			}
		}
	}
	return left
}

// The tutorial's print() lines reach drover while the script still runs
// (its stdout is a pipe: without PYTHONUNBUFFERED Python holds them in an
// 8 KiB buffer until it exits), and hang_timeout = "15s" never fires on
// the healthy run, which prints a line every second for 20 s.
func TestNewUserPrintArrivesAndNoFalseHang(t *testing.T) {
	needFleet(t)
	dir := newUserJob(t, "pytorch", 2, []string{"20", "1"}, `hang_timeout = "15s"`, "max_restarts = 0")
	r := startDrover(t, dir, "run", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	// The first step's line, while the script still trains: it has 19
	// more steps, a second each, to go.
	first := regexp.MustCompile(`(?m)^\[worker-0@\S+\] rank 0 step 0 done$`)
	// Bounded by the script's 20 s of steps: drover exits after them.
	testenv.WaitFor(t, runTimeout, "rank 0's first line", func() bool {
		out, err := os.ReadFile(r.stdout)
		require.NoError(t, err)
		if first.Match(out) {
			assert.NotContains(t, string(out), "rank 0 step 19 done", "the line came only with the last ones")
			require.False(t, r.finished(), "the line came only when the script exited; output:\n%s", r.output())
			return true
		}
		require.False(t, r.finished(), "drover exited before rank 0's first line; output:\n%s", r.output())
		return false
	})
	require.Equal(t, 0, r.wait(t), "drover exit status; output:\n%s", r.output())
	events := r.events(t)
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
	assert.NotContains(t, events, "hung", "hang_timeout fired on a healthy run")
	assert.Contains(t, events, "succeeded after 1 attempt(s)")
}

// Under torchrun a worker SIGKILLed at start-up (its peers wait for it in
// the rendezvous, and its torchrun in the 300 s exit barrier) ends the
// attempt as soon as its agent sees it die: the group restarts, and when
// the restarted worker is killed the same way the run fails, its summary
// naming the rank, its host and SIGKILL as the root cause, all well
// within runTimeout (150 s), half of torchrun's barrier.
func TestNewUserTorchrunWorkerKilledAtStartup(t *testing.T) {
	needFleet(t)
	const host, rank = 1, 3
	dir := newUserJob(t, "torchrun", 2, []string{"30", "1"}, "max_restarts = 1")
	r := startDrover(t, dir, "run", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	name := fleet.Hosts[host].Name
	for restart := range 2 {
		p := tutorialWorker(t, r, host, rank, restart)
		// At start-up: once it has imported torch and said so, before
		// its rendezvous completes (its peers then wait for it). Only
		// node-1 runs rank 3; its two workers share torchrun's stdout,
		// and python -u writes a print's text and its newline apart, so
		// the line may reach drover glued to the other worker's
		// ("...on rank 2.Running basic DDP example on rank 3.\n\n"):
		// the message is counted, not the line.
		waitOutput(t, r, "Running basic DDP example on rank 3.", restart+1)
		t.Logf("attempt %d: kill -9 %d (rank %d) on %s", restart+1, p.pid, rank, name)
		require.NoError(t, syscall.Kill(p.pid, syscall.SIGKILL))
	}
	require.Equal(t, 1, r.wait(t), "drover exit status; output:\n%s", r.output())
	events := r.events(t)
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
	assert.Regexp(t, `attempt 1/2: rank 3 \(node-1@`+name+`\) killed by SIGKILL \(137\)`, events, "attempt 1's failure")
	assert.Regexp(t, `attempt 2/2: restarting the whole group`, events)
	assert.Regexp(t, `(?m)^root cause: node-1 on `+name+`: rank 3 \(node-1@`+name+`\) killed by SIGKILL \(137\)`, events, "the summary's root cause")
	assert.NotContains(t, events, "error_file: <N/A>", "torchrun's failure table is no root cause")
}

// A DDP desync: ranks 0 and 1 return after the first step and exit 0 while
// ranks 2 and 3 train on, and then fail on the closed connections. The
// early exits are an event, named before the failure, and the summary
// gives them as the root cause, the victims' errors after it.
func TestNewUserDesyncEvent(t *testing.T) {
	events := desyncEvents(t, "pytorch")
	h0 := fleet.Hosts[0].Name
	early := regexp.MustCompile(`attempt 1/1: worker-[01]@` + h0 + ` finished while [0-9]+ other\(s\) still run`)
	failed := regexp.MustCompile(`attempt 1/1: worker-[23]@\S+ exited`)
	e, f := early.FindStringIndex(events), failed.FindStringIndex(events)
	require.NotNil(t, e, "no event for the early exits:\n%s", events)
	require.NotNil(t, f, "no failure event:\n%s", events)
	assert.Less(t, e[0], f[0], "the early exit is named after the failure:\n%s", events)
	assert.Regexp(t, `(?m)^root cause: worker-[01] on `+h0+`: worker-[01]@`+h0+` finished while`, events)
	assert.Regexp(t, `(?m)^then: worker-[23] on `, events, "the victims come after the root cause")
}

// The same desync under torchrun: node-0's workers (ranks 0 and 1) finish
// after the first step, and torchrun there waits in its exit barrier
// while node-1's workers fail on the closed connections. The early
// workers' exits, as their agent reports them, are the root cause, even
// when a victim's failure reaches drover first (it is held for them).
func TestNewUserTorchrunDesyncEvent(t *testing.T) {
	events := desyncEvents(t, "torchrun")
	h0 := regexp.QuoteMeta(fleet.Hosts[0].Name)
	assert.Regexp(t, `attempt 1/1: rank [01] \(node-0@`+h0+`\) finished while`, events, "no event for the early exits")
	assert.Regexp(t, `attempt 1/1: rank [23] \(node-1@\S+\) exited 1: .*; the attempt's first event: rank [01] \(node-0@`+h0+`\) finished while`, events)
	assert.Regexp(t, `(?m)^root cause: node-0 on `+h0+`: rank [01] \(node-0@`+h0+`\) finished while`, events)
	assert.Regexp(t, `(?m)^then: node-1 on `, events, "the victims come after the root cause")
}

// desyncEvents runs the tutorial's desync (ranks 0 and 1 leave after the
// first step) under framework, with no restart, and returns drover's
// events once it has failed.
func desyncEvents(t *testing.T, framework string) string {
	t.Helper()
	needFleet(t)
	dir := newUserJob(t, framework, 2, []string{"30", "1", "desync"}, "max_restarts = 0")
	r := startDrover(t, dir, "run", "--quiet", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	require.Equal(t, 1, r.wait(t), "drover exit status; output:\n%s", r.output())
	events := r.events(t)
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
	return events
}

// SIGKILL of one rank's agent, with max_restarts = 0: drover exits 1, and
// within stop_grace + 3 s nothing of the job runs on any host, not the
// rank (it dies with its agent), nor the child it started (drover stops
// its group through the host before it exits).
func TestNewUserAgentKilledLeavesNothing(t *testing.T) {
	needFleet(t)
	const host, rank = 1, 3
	dir := newUserJob(t, "pytorch", 2, []string{"60", "1", "child"}, "max_restarts = 0")
	r := startDrover(t, dir, "run", "--quiet", "--log-dir", filepath.Join(dir, "runs"), filepath.Join(dir, "job.toml"))
	p := tutorialWorker(t, r, host, rank, 0)
	// Its agent: the rank's parent, a drover agent run.
	agentProc, err := readProc(p.ppid)
	require.NoError(t, err)
	require.True(t, slices.Contains(agentProc.argv, "agent") && slices.Contains(agentProc.argv, "run"),
		"parent %d of rank %d is %q, not its agent", p.ppid, rank, agentProc.argv)
	for _, kv := range agentProc.env {
		assert.NotEqual(t, "RANK=3", kv, "the agent's environ holds the rank's environment")
	}
	// Wait for the child, so that there is something for the group stop.
	testenv.Wait(t, runTimeout, "the ranks' children to start", func() (bool, string) {
		return strings.Contains(strings.Join(jobProcs(t, 2), "\n"), "newuser-child"), "output:\n" + r.output()
	})
	t.Logf("kill -9 %d (the agent of rank %d) on %s", agentProc.pid, rank, fleet.Hosts[host].Name)
	require.NoError(t, syscall.Kill(agentProc.pid, syscall.SIGKILL))
	require.Equal(t, 1, r.wait(t), "drover exit status; output:\n%s", r.output())
	limit := 2*time.Second + 3*time.Second // stop_grace + 3 s
	testenv.Wait(t, limit, "no process of the job left after drover exited", func() (bool, string) {
		left := jobProcs(t, 2)
		return len(left) == 0, strings.Join(left, "\n") + "\noutput:\n" + r.output()
	})
	assert.Contains(t, r.events(t), "the agent of worker-3@"+fleet.Hosts[host].Name+" died (SIGKILL)")
}

// waitOutput waits until drover's stdout holds text n times.
func waitOutput(t *testing.T, r *droverRun, text string, n int) {
	t.Helper()
	testenv.Wait(t, runTimeout, fmt.Sprintf("drover's output to hold %q %d time(s)", text, n), func() (bool, string) {
		if r.finished() {
			t.Fatalf("drover exited before its output held %q %d time(s); output:\n%s", text, n, r.output())
		}
		out, err := os.ReadFile(r.stdout)
		require.NoError(t, err)
		return strings.Count(string(out), text) >= n, "output:\n" + r.output()
	})
}
