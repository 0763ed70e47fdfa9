package longrun

// Fleet tests of detached runs (issue 26): drover run -d, status, logs,
// stop, from other sessions and directories than the one that started
// the run.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/runview"
)

// Done-when 1, 2, 3 and 5: a detached run survives the session that
// started it, restarts a killed rank with nobody attached, shows one
// rank's lines, and stops from another directory.
func TestRunDetachedStatusLogsStop(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.CheckpointingScript, Hosts: 3, Job: "procs_per_host = 2\nmax_restarts = 3\ncheckpoint_dir = \"ckpt\""})
	sup := kit.StartDetachedRun(t, j)

	st := kit.WaitStatus(t, j, 30*time.Second, "6 running", func(st runview.RunStatus) bool { return kit.Running(st) == 6 })
	assert.Equal(t, agent.RunRunning, st.State)
	assert.Equal(t, 1, st.Attempt)
	assert.Equal(t, 0, st.Restarts)
	assert.True(t, st.Supervisor.Alive, "supervisor: %+v", st.Supervisor)
	assert.Equal(t, sup, st.Supervisor.PID)
	require.Len(t, st.Processes, 6)
	kit.AssertPs(t, j, st.RunID)

	// SIGKILL rank 3 with nobody attached: the background supervisor
	// restarts the group.
	var victim int
	for _, p := range st.Processes {
		if p.Rank == 3 {
			victim = p.PID
		}
	}
	require.NotZero(t, victim)
	ckpt := kit.WaitStatus(t, j, 30*time.Second, "a checkpoint", func(st runview.RunStatus) bool { return st.Checkpoint != "" }).Checkpoint
	// drover attach shows the live lines and the restart; Ctrl-C only
	// detaches it.
	att := kit.StartDroverArgs(t, j, "attach", j.Path)
	att.WaitOutput(t, regexp.MustCompile(`(?m)^\[worker-3@\S+\] n=\d+ rank=3 restart=0 `), 30*time.Second)
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	st = kit.WaitStatus(t, j, 30*time.Second, "restarts 1 and 6 running", func(st runview.RunStatus) bool {
		return st.Restarts == 1 && st.State == agent.RunRunning && kit.Running(st) == 6
	})
	assert.Equal(t, 2, st.Attempt)
	att.WaitOutput(t, regexp.MustCompile(`(?m)^\[worker-3@\S+\] n=\d+ rank=3 restart=1 `), 30*time.Second)
	att.Signal(t, syscall.SIGINT)
	require.Equal(t, 0, att.Wait(t, 10*time.Second))
	assert.Contains(t, att.Stderr.String(), "re-attach: drover attach")
	assert.Regexp(t, `run \S+: (restarting|running), attempt 2`, att.Stderr.String())
	follow := kit.StartDroverArgs(t, j, "logs", j.Path, "--follow", "--rank", "0")

	// Rank 3's lines, and no other rank's.
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "3")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^\[worker-3@\S+\] n=\d+ rank=3 restart=1 `, out)
	assert.NotRegexp(t, `rank=[^3]`, out)
	// Restarted from the newest checkpoint: rank 0 counts on from it.
	out, errs, code = kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0")
	require.Equal(t, 0, code, errs)
	ns := numbers(t, out, 0)
	require.NotEmpty(t, ns)
	resumed, _ := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(st.Checkpoint, "step-"), "0"))
	assert.Equal(t, resumed, ns[0], "attempt 2 starts at checkpoint %s (seen before the kill: %s)", st.Checkpoint, ckpt)
	assert.GreaterOrEqual(t, ns[0], 20)

	// drover stop from another directory, with no runs/ there.
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	st = kit.Status(t, j)
	assert.Equal(t, agent.RunStopped, st.State)
	assert.Equal(t, 0, kit.Running(st))
	// logs --follow ends with the run, its last lines printed.
	require.Equal(t, 0, follow.Wait(t, 30*time.Second))
	assert.Regexp(t, `(?m)^\[worker-0@\S+\] n=\d+ rank=0 restart=1 `, follow.Stdout.String())
}

// With the supervisor SIGKILLed the group runs on, unsupervised, and
// drover stop stops it through the agents.
func TestRunDetachedSupervisorGone(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2})
	sup := kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))

	st := kit.WaitStatus(t, j, 30*time.Second, "unsupervised", func(st runview.RunStatus) bool { return st.State == agent.RunUnsupervised })
	assert.Equal(t, 2, kit.Running(st))
	assert.False(t, st.Supervisor.Alive)
	first, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0")
	require.Equal(t, 0, code, errs)
	testenv.WaitFor(t, 15*time.Second, "the numbered lines to grow with no supervisor", func() bool {
		again, _, _ := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0")
		return len(again) > len(first)
	})

	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "through its agents")
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	assert.Equal(t, agent.RunStopped, kit.Status(t, j).State)
}

// controller_timeout: agents stop the group that long after the last
// supervisor went.
func TestRunDetachedControllerTimeout(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2, Job: `controller_timeout = "2s"`})
	sup := kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second)
	st := kit.Status(t, j)
	for _, p := range st.Processes {
		assert.Equal(t, agent.ProcStopped, p.State, "%+v", p)
	}

	// The run's record on the hosts is not final (its supervisor died),
	// but its group is gone: a foreground run's look finds the record,
	// adopts nothing and starts a group of its own.
	d := kit.StartDrover(t, j)
	d.WaitStderr(t, regexp.MustCompile(`attempt 1/\d+: started 2 process\(es\) on 2 host\(s\)`), 60*time.Second)
	d.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 30*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.NotContains(t, d.Stderr.String(), "adopting")
	assert.Contains(t, d.Stderr.String(), "the hosts' newest run record is not final, but no process of that run is left: starting a new group")
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second)
}

// numbers are the n= values of rank's lines in out, in order.
func numbers(t *testing.T, out string, rank int) []int {
	t.Helper()
	var ns []int
	for _, m := range regexp.MustCompile(`(?m)n=(\d+) rank=`+strconv.Itoa(rank)+` `).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}

// assertConsecutive checks that ns is 0, 1, 2, ... with nothing lost or
// doubled.
func assertConsecutive(t *testing.T, ns []int, what string) {
	t.Helper()
	require.NotEmpty(t, ns, what)
	for i, n := range ns {
		if n != i {
			t.Fatalf("%s: line %d has n=%d (lost or doubled lines): %v", what, i, n, ns)
		}
	}
}

// Done-when 4: the supervisor SIGKILLed, the group runs on; drover run -d
// adopts it with the attempt unchanged, restarts a rank killed after that,
// and every line of the attempt is in the logs exactly once. The restart
// the new supervisor makes keeps the run's DROVER_RUN_ID (issue 40, item 5).
func TestRunDetachedAdopt(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `echo "id=$DROVER_RUN_ID attempt=$DROVER_ATTEMPT rank=$RANK"` + "\n" + kit.NumberedScript,
		Hosts: 3, Job: "procs_per_host = 2\nmax_restarts = 3"})
	sup := kit.StartDetachedRun(t, j)
	st := kit.WaitStatus(t, j, 30*time.Second, "6 running", func(st runview.RunStatus) bool { return kit.Running(st) == 6 })
	id := st.RunID
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0")
	require.Equal(t, 0, code, errs)
	atKill := len(numbers(t, out, 0))
	// 15 s of lines (one every 0.2 s) with no supervisor.
	testenv.Wait(t, 60*time.Second, "rank 0 to print 75 more lines with no supervisor", func() (bool, string) {
		n := len(numbers(t, out, 0))
		if n >= atKill+75 {
			return true, ""
		}
		out, _, _ = kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0")
		return false, fmt.Sprintf("%d lines", n)
	})

	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Regexp(t, `adopting attempt 1 of run `+id+` \(supervisor \S+ pid `+strconv.Itoa(sup)+` gone since \d\d:\d\d:\d\d\)`, d.Stderr.String())
	sup2 := 0
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ = strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	st = kit.WaitStatus(t, j, 30*time.Second, "a live supervisor", func(st runview.RunStatus) bool { return st.Supervisor.Alive })
	assert.Equal(t, id, st.RunID)
	assert.Equal(t, 1, st.Attempt, "adopted, not restarted")
	assert.Equal(t, 0, st.Restarts)
	assert.Equal(t, sup2, st.Supervisor.PID)
	assert.Equal(t, 6, kit.Running(st))

	var victim int
	for _, p := range st.Processes {
		if p.Rank == 3 {
			victim = p.PID
		}
	}
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	kit.WaitStatus(t, j, 30*time.Second, "restarted by the new supervisor", func(st runview.RunStatus) bool {
		return st.Restarts == 1 && st.Attempt == 2 && kit.Running(st) == 6
	})

	out, errs, code = kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0", "--attempt", "1")
	require.Equal(t, 0, code, errs)
	assertConsecutive(t, numbers(t, out, 0), "drover logs --rank 0 --attempt 1")
	assertConsecutive(t, numbers(t, j.LogFile(t, 1, "worker-0"), 0), "local attempt-1/worker-0.log across the adoption")
	for n := 1; n <= 2; n++ {
		want := fmt.Sprintf("id=%s attempt=%d rank=0\n", id, n)
		testenv.Wait(t, 30*time.Second, "attempt's log to show "+want, func() (bool, string) {
			out, errs, _ := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "0", "--attempt", strconv.Itoa(n))
			return strings.Contains(out, want), errs + kit.Tail(out, 300)
		})
	}

	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}

// A live supervisor makes a second drover run -d exit 2 naming it; with
// --force the second takes the group over as it is and the first lets go
// of it without stopping it.
func TestRunDetachedSecondSupervisor(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2})
	sup := kit.StartDetachedRun(t, j)
	before := kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })

	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	assert.Equal(t, 2, code, errs)
	assert.Contains(t, errs, "pid "+strconv.Itoa(sup))

	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", "--force", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Contains(t, d.Stderr.String(), "adopting attempt 1 of run "+before.RunID)
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ := strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	// The first supervisor lets go and exits; the group is untouched.
	testenv.WaitFor(t, 30*time.Second, "the first supervisor to exit after the takeover", func() bool {
		if syscall.Kill(sup, 0) != nil {
			return true
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(sup, &ws, syscall.WNOHANG, nil)
		return false
	})
	after := kit.WaitStatus(t, j, 30*time.Second, "the new supervisor", func(st runview.RunStatus) bool { return st.Supervisor.Alive })
	assert.Equal(t, 1, after.Attempt)
	require.Equal(t, 2, kit.Running(after))
	for i := range before.Processes {
		assert.Equal(t, before.Processes[i].PID, after.Processes[i].PID, "the same processes, not restarted")
	}
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}

// channelProcs are the job's processes on the hosts that hang on a
// supervisor's channel (attach clients), not the detached agents and
// their groups.
func channelProcs(t *testing.T, job string) []kit.HostProc {
	t.Helper()
	var out []kit.HostProc
	for _, p := range kit.JobProcs(t, job) {
		if strings.Contains(p.Cmdline, " agent attach ") || (strings.Contains(p.Cmdline, " agent run ") && !strings.Contains(p.Cmdline, "--detached-child")) {
			out = append(out, p)
		}
	}
	return out
}

// Laptop sleep: the background supervisor stopped (SIGSTOP) for longer
// than the heartbeat loses its channels; woken, it attaches to the same
// attempt again, and its local log has every line once.
func TestRunDetachedSupervisorSuspended(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2})
	sup := kit.StartDetachedRun(t, j)
	st := kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGSTOP))
	testenv.Wait(t, 30*time.Second, "the attach clients to go with the supervisor stopped", func() (bool, string) {
		left := channelProcs(t, j.Name)
		return len(left) == 0, fmt.Sprintf("%v", left)
	})
	require.NoError(t, syscall.Kill(sup, syscall.SIGCONT))
	events := filepath.Join(j.RunDir(t), "events.log")
	kit.WaitFile(t, events, regexp.MustCompile(`adopting attempt 1 of run `+st.RunID+` \(re-attaching`), 60*time.Second)
	after := kit.WaitStatus(t, j, 30*time.Second, "supervised again", func(st runview.RunStatus) bool { return st.Supervisor.Alive && kit.Running(st) == 2 })
	assert.Equal(t, 1, after.Attempt)
	assert.Equal(t, 0, after.Restarts)
	for i := range st.Processes {
		assert.Equal(t, st.Processes[i].PID, after.Processes[i].PID, "the same processes, not restarted")
	}
	local := filepath.Join(j.RunDir(t), "attempt-1", "worker-0.log")
	b, _ := os.ReadFile(local)
	have := len(numbers(t, string(b), 0))
	text := kit.WaitFile(t, local, regexp.MustCompile(`n=`+strconv.Itoa(have+10)+` rank=0 `), 30*time.Second)
	assertConsecutive(t, numbers(t, text, 0), "local worker-0.log across the suspension")

	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}

// drover stop --abort kills at once: the processes ignore SIGTERM and
// stop_grace is longer than the stop is given.
func TestRunDetachedStopAbort(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "trap '' TERM\n" + kit.NumberedScript, Hosts: 2, Job: `stop_grace = "5m"`})
	kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", "--abort", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	assert.Equal(t, agent.RunStopped, kit.Status(t, j).State)
}

// A process that dies while nobody supervises is handled when a
// supervisor is back: the adopting one finds it exited and restarts the
// group.
func TestRunDetachedDeathWhileUnsupervised(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2, Job: "max_restarts = 3"})
	sup := kit.StartDetachedRun(t, j)
	st := kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	require.NoError(t, syscall.Kill(st.Processes[1].PID, syscall.SIGKILL))
	st = kit.WaitStatus(t, j, 30*time.Second, "rank 1 exited, unsupervised", func(st runview.RunStatus) bool {
		return st.State == agent.RunUnsupervised && kit.Running(st) == 1
	})
	assert.Equal(t, 0, st.Restarts, "nobody restarts it while nobody supervises")

	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ := strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	assert.Contains(t, d.Stderr.String(), "adopting attempt 1 of run "+st.RunID)
	kit.WaitStatus(t, j, 60*time.Second, "restarted", func(st runview.RunStatus) bool {
		return st.Restarts == 1 && st.Attempt == 2 && kit.Running(st) == 2 && st.Supervisor.Alive
	})
	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}
