package launcher

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
)

// The restart policy (package restart) sees an attempt's outcome as
// policy() gives it: a connection lost during setup is a lost host, and a
// workdir another run holds is as permanent as refused credentials.
func TestOutcomePolicy(t *testing.T) {
	lost := setupFailed(fmt.Errorf("push to h1: %w", cluster.ErrConnectionLost)).policy()
	assert.Equal(t, restart.HostLost, lost.Kind)
	assert.Equal(t, -1, lost.ExitCode)
	held := setupFailed(fmt.Errorf("lease: %w", &lease.HeldError{})).policy()
	assert.Equal(t, restart.SetupFailed, held.Kind)
	assert.True(t, held.Permanent)
	assert.False(t, setupFailed(errors.New("preflight")).policy().Permanent)
	final := attemptOutcome{kind: outcomeSetupFailed, exitCode: -1, err: errors.New("h1: auth"), permanent: true}.policy()
	assert.Equal(t, restart.Outcome{Kind: restart.SetupFailed, ExitCode: -1, Err: errors.New("h1: auth"), Permanent: true}, final)
	exited := attemptOutcome{kind: outcomeFailed, exitCode: 137, err: errors.New("worker-1@b exited 137")}.policy()
	assert.Equal(t, restart.Outcome{Kind: restart.Failed, ExitCode: 137, Err: errors.New("worker-1@b exited 137")}, exited)
	retry, _ := restart.Retryable(config.Job{}, setupFailed(fmt.Errorf("push to h1: %w", cluster.ErrConnectionLost)).policy(), 1)
	assert.True(t, retry, "a lost host during the first setup is retried")
	retry, why := restart.Retryable(config.Job{}, setupFailed(config.ConfigErrors{{File: "job.toml", Msg: "bad"}}).policy(), 2)
	assert.False(t, retry)
	assert.Contains(t, why, "could not be set up")
}

func TestSucceededPolicy(t *testing.T) {
	proc := func(role plan.Role, index int) *running { return &running{p: plan.Process{Role: role, Index: index}} }
	tfChief := []*running{proc("chief", 0), proc("worker", 0), proc("worker", 1), proc("ps", 0), proc("evaluator", 0)}
	tfNoChief := []*running{proc("worker", 0), proc("worker", 1), proc("ps", 0)}
	torch := []*running{proc("worker", 0), proc("worker", 1)}
	tests := []struct {
		name      string
		framework config.Framework
		policy    config.SuccessPolicy
		procs     []*running
		finished  []bool
		want      bool
	}{
		{"pytorch all done", config.PyTorch, "", torch, []bool{true, true}, true},
		{"pytorch one left", config.PyTorch, "", torch, []bool{true, false}, false},
		{"tf all-workers: ps and evaluator may run", config.TensorFlow, "all-workers", tfChief, []bool{true, true, true, false, false}, true},
		{"tf all-workers: a worker left", config.TensorFlow, "all-workers", tfChief, []bool{true, true, false, false, false}, false},
		{"tf all-workers: chief left", config.TensorFlow, "all-workers", tfChief, []bool{false, true, true, false, false}, false},
		{"tf chief: chief done", config.TensorFlow, "chief", tfChief, []bool{true, false, false, false, false}, true},
		{"tf chief: chief running", config.TensorFlow, "chief", tfChief, []bool{false, true, true, true, true}, false},
		{"tf chief without chief: worker 0 is chief", config.TensorFlow, "chief", tfNoChief, []bool{true, false, false}, true},
		{"tf chief without chief: worker 0 running", config.TensorFlow, "chief", tfNoChief, []bool{false, true, true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &attempt{cfg: &config.Config{Job: config.Job{Framework: tt.framework, SuccessPolicy: tt.policy}}}
			procs := make([]*running, len(tt.procs))
			for i, rp := range tt.procs {
				procs[i] = &running{p: rp.p, done: tt.finished[i]}
			}
			assert.Equal(t, tt.want, (&supervisor{a: a}).succeeded(procs))
		})
	}
}

func TestDescribeExit(t *testing.T) {
	tests := []struct {
		err  error
		text string
		code int
		lost bool
	}{
		{nil, "0", 0, false},
		{&cluster.ExitError{Code: 3}, "3", 3, false},
		{&cluster.ExitError{Code: 137, Signal: "KILL"}, "137 (SIGKILL)", 137, false},
		{&cluster.ExitError{Code: 143}, "143 (SIGTERM)", 143, false}, // the agent reports signals as 128+n
		{fmt.Errorf("h1 (10.0.0.1): %w: no reply", cluster.ErrConnectionLost), "host lost", -1, true},
	}
	for _, tt := range tests {
		text, code, lost := describeExit(tt.err)
		assert.Equal(t, tt.text, text)
		assert.Equal(t, tt.code, code)
		assert.Equal(t, tt.lost, lost)
	}
}

// updateExec rewrites the summary golden file (the flag exec's tests, now
// in package fanout, share).
var updateExec = flag.Bool("update-exec", false, "rewrite testdata/golden/run_summary.txt")

func TestRenderSummary(t *testing.T) {
	procs := []ProcSummary{
		{Name: "chief-0", Host: "gpu-a", Attempts: 3, Exit: "0", Duration: 83*time.Second + 456*time.Millisecond},
		{Name: "worker-0", Host: "gpu-a", Attempts: 3, Exit: "1", Duration: 2 * time.Minute,
			Cause: "RuntimeError: CUDA out of memory (train.py:212)"},
		{Name: "worker-1", Host: "gpu-bb", Attempts: 2, Exit: "host lost", Duration: 1500 * time.Millisecond},
		{Name: "ps-0", Host: "gpu-bb", Attempts: 3, Exit: "143 (SIGTERM)", Duration: 4*time.Minute + 1234567*time.Microsecond},
		{Name: "evaluator-0", Host: "gpu-bb", Attempts: 0, Exit: "not started"},
	}
	var b bytes.Buffer
	for _, res := range []*Result{
		{Outcome: Succeeded, Attempts: 3, LogDir: "runs/mnist-20260102-030405", Processes: procs},
		{Outcome: Failed, Attempts: 3, LogDir: "runs/mnist-20260102-030405", Processes: procs[:2],
			Err: errors.New("worker-0@gpu-a exited 1; no restarts left (max_restarts = 2)")},
		{Outcome: Interrupted, Attempts: 1, LogDir: "runs/mnist-20260102-030405", Processes: procs[4:]},
		{Outcome: Failed, Attempts: 1, LogDir: "runs/mnist-20260102-030405",
			Err: errors.New("preflight on gpu-a (10.0.0.11): program trainer: not found; not restarting")},
	} {
		RenderSummary(&b, res)
		b.WriteString("--\n")
	}
	golden := filepath.Join("testdata", "golden", "run_summary.txt")
	if *updateExec {
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())
}

// buildDrover builds the drover binary, which local runs use as the agent
// (InstallAgent uses it in place for local hosts).
func buildDrover(t *testing.T) string {
	t.Helper()
	bin, err := fleettest.BuildDrover(t.TempDir())
	require.NoError(t, err)
	return bin
}

// localJob writes a job with two local hosts (workdirs wd-a/ and wd-b/
// under a fresh HOME) running `sh w.sh` with script, and returns its path.
func localJob(t *testing.T, script, jobLines string) string {
	t.Helper()
	t.Setenv("HOME", t.TempDir()) // the local hosts' home: fresh workdirs
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code", "w.sh"), []byte(script), 0o644))
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = \"local\"\ncommand = [\"sh\", \"w.sh\"]\ncode = \"code\"\nstop_grace = \"2s\"\nrestart_backoff = \"100ms\"\n%s\n", jobLines)
	if !strings.Contains(jobLines, "framework") {
		b.WriteString("framework = \"pytorch\"\n")
	}
	for _, h := range []string{"a", "b"} {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\ntransport = \"local\"\nworkdir = %q\ngpus = []\n", h, "wd-"+h)
	}
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(b.String()), 0o644))
	return job
}

func readLog(t *testing.T, res *Result, attempt int, proc string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(res.LogDir, fmt.Sprintf("attempt-%d", attempt), proc+".log"))
	require.NoError(t, err)
	return string(data)
}

// TestRunLocal runs whole jobs on local hosts (no root, no SSH): the
// supervisor's policies with real agents and real processes.
func TestRunLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)

	run := func(t *testing.T, ctx context.Context, job string) (*Result, string, string) {
		t.Helper()
		var out, events bytes.Buffer
		res, err := Run(ctx, RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
		require.NoError(t, err, "events:\n%s", events.String())
		t.Logf("events:\n%s", events.String())
		return res, out.String(), events.String()
	}
	port := 29611 // every case its own master_port, so none waits for another's
	nextPort := func() string { port++; return fmt.Sprintf("master_port = %d\n", port) }

	t.Run("success", func(t *testing.T) {
		res, out, _ := run(t, context.Background(), localJob(t, `echo "rank $RANK of $WORLD_SIZE restart $DROVER_RESTART_COUNT"`, nextPort()))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.ElementsMatch(t, []string{"[worker-0@a] rank 0 of 2 restart 0", "[worker-1@b] rank 1 of 2 restart 0"},
			strings.Split(strings.TrimSpace(out), "\n"))
		assert.Equal(t, "rank 1 of 2 restart 0\n", readLog(t, res, 1, "worker-1"))
		require.Len(t, res.Processes, 2)
		assert.Equal(t, ProcSummary{Name: "worker-0", Host: "a", Attempts: 1, Exit: "0", Duration: res.Processes[0].Duration}, res.Processes[0])
		assert.FileExists(t, filepath.Join(res.LogDir, "events.log"))
	})

	t.Run("failure restarts the group", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `
echo "restart $DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	if [ "$RANK" = 1 ]; then exit 3; fi
	sleep 1000
fi
`, nextPort()+"max_restarts = 2\n"))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 2, res.Attempts)
		assert.Contains(t, events, "attempt 1/3: worker-1@b exited 3; stopping 1 process(es)")
		assert.Contains(t, events, "attempt 2/3: restarting the whole group in 100ms")
		assert.Equal(t, "restart 0\n", readLog(t, res, 1, "worker-0"))
		assert.Equal(t, "restart 1\n", readLog(t, res, 2, "worker-0"))
		assert.Equal(t, "restart 1\n", readLog(t, res, 2, "worker-1"))
		for _, p := range res.Processes {
			assert.Equal(t, 2, p.Attempts, p.Name)
			assert.Equal(t, "0", p.Exit, p.Name)
		}
	})

	t.Run("restart_policy never", func(t *testing.T) {
		res, _, _ := run(t, context.Background(), localJob(t, `if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1000`,
			nextPort()+"restart_policy = \"never\"\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.EqualError(t, res.Err, `worker-1@b exited 3; not restarting: restart_policy = "never"`)
		assert.Equal(t, "143 (SIGTERM)", res.Processes[0].Exit, "the other process was stopped")
	})

	t.Run("restart_policy exit-code: 1-127 permanent", func(t *testing.T) {
		res, _, _ := run(t, context.Background(), localJob(t, `if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1000`,
			nextPort()+"restart_policy = \"exit-code\"\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.ErrorContains(t, res.Err, `worker-1@b exited 3; not restarting: exit status 3 is permanent under restart_policy = "exit-code"`)
	})

	t.Run("restart_policy exit-code: signals retried", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then kill -KILL $$; fi
echo "restart $DROVER_RESTART_COUNT"
`, nextPort()+"restart_policy = \"exit-code\"\n"))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 2, res.Attempts)
		assert.Contains(t, events, "worker-1@b exited 137 (SIGKILL)")
		assert.Equal(t, "restart 1\n", readLog(t, res, 2, "worker-1"))
	})

	t.Run("max_restarts exhausted", func(t *testing.T) {
		res, _, _ := run(t, context.Background(), localJob(t, `exit 5`, nextPort()+"max_restarts = 1\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 2, res.Attempts)
		assert.ErrorContains(t, res.Err, "no restarts left (max_restarts = 1)")
		for _, p := range res.Processes {
			assert.Equal(t, 2, p.Attempts, p.Name)
		}
	})

	t.Run("success_policy chief", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `
case "$DROVER_ROLE" in
chief) sleep 0.3; echo "chief done" ;;
*) echo "$DROVER_ROLE $DROVER_INDEX waits"; sleep 1000 ;;
esac
`, fmt.Sprintf("framework = \"tensorflow\"\nprocs_per_host = 2\nsuccess_policy = \"chief\"\nbase_port = %d\n\n[job.roles]\nchief = 1\nworker = 2\nps = 1\n", port+100)))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.Contains(t, events, "success policy met (chief); stopping 3 process(es)")
		exits := map[string]string{}
		for _, p := range res.Processes {
			exits[p.Name] = p.Exit
		}
		assert.Equal(t, map[string]string{"chief-0": "0", "worker-0": "143 (SIGTERM)", "worker-1": "143 (SIGTERM)", "ps-0": "143 (SIGTERM)"}, exits)
	})

	t.Run("hang_timeout: a silent group is stopped with its stacks and restarted", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	echo "rank $RANK up"
	exec /usr/bin/python3 -c '
import os, signal, time
def freeze():
    os.kill(os.getpid(), signal.SIGSTOP)
def wait_forever():
    time.sleep(1000)
freeze() if os.environ["RANK"] == "1" else wait_forever()
'
fi
echo "restart $DROVER_RESTART_COUNT"
`, nextPort()+"hang_timeout = \"2s\"\n"))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 2, res.Attempts)
		assert.Regexp(t, `attempt 1/4: group hung: no process showed progress for \d+s \(hang_timeout = 2s\); the last was worker-[01]@[ab] at [0-9:.]+; asking every Python process for its stack`, events)
		// Each rank's stack is in its own log, the frozen one's too.
		assert.Regexp(t, `(?s)Fatal Python error: Aborted.*File "<string>", line 6 in wait_forever`, readLog(t, res, 1, "worker-0"))
		assert.Regexp(t, `(?s)Fatal Python error: Aborted.*File "<string>", line 4 in freeze`, readLog(t, res, 1, "worker-1"))
		assert.Equal(t, "restart 1\n", readLog(t, res, 2, "worker-1"))
	})

	t.Run("hang_timeout: touching DROVER_PROGRESS_FILE is progress", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `
# Silent for 5s, twice hang_timeout, but for the touches.
i=0; while [ $i -lt 17 ]; do touch "$DROVER_PROGRESS_FILE"; sleep 0.3; i=$((i+1)); done
echo "done $DROVER_RESTART_COUNT"
`, nextPort()+"hang_timeout = \"2s\"\n"))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.NotContains(t, events, "hung")
	})

	t.Run("a restart moves a master_port still held", func(t *testing.T) {
		// Before the first attempt fails, something outside the job takes
		// its master_port (here: this test); the restart must not fail
		// on it.
		sync := t.TempDir()
		mp := port + 1
		go func() {
			ready := func() bool { _, err := os.Stat(filepath.Join(sync, "ready")); return err == nil }
			if !assert.NoError(t, testenv.Until(2*time.Minute, "the first attempt's ready file", ready)) {
				return
			}
			l, err := net.Listen("tcp", fmt.Sprintf(":%d", mp))
			if !assert.NoError(t, err) {
				return
			}
			t.Cleanup(func() { l.Close() })
			assert.NoError(t, os.WriteFile(filepath.Join(sync, "held"), nil, 0o644))
		}()
		res, _, events := run(t, context.Background(), localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	if [ "$RANK" = 0 ]; then
		touch "$SYNC/ready"
		while [ ! -e "$SYNC/held" ]; do sleep 0.05; done
		exit 3
	fi
	sleep 1000
fi
echo "port $MASTER_PORT"
`, nextPort()+"framework = \"pytorch\"\n[job.env]\nSYNC = \""+sync+"\"\n"))
		require.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 2, res.Attempts)
		m := regexp.MustCompile(fmt.Sprintf(`attempt 2/4: port\(s\) %d held on a; this attempt uses (\d+)`, mp)).FindStringSubmatch(events)
		require.NotNil(t, m, "the event names the port used")
		assert.NotEqual(t, strconv.Itoa(mp), m[1])
		assert.Equal(t, "port "+m[1]+"\n", readLog(t, res, 2, "worker-0"))
		assert.Equal(t, "port "+m[1]+"\n", readLog(t, res, 2, "worker-1"), "every process gets the port used")
	})

	t.Run("a setup error at a restart is retried", func(t *testing.T) {
		// The first attempt fails and takes the code directory away; the
		// restart's push fails on it (a setup error); drover must try
		// again, and once the directory is back the job succeeds.
		job := localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	if [ "$RANK" = 1 ]; then mv "$CODE" "$CODE.away"; exit 3; fi
	sleep 1000
fi
echo "restart $DROVER_RESTART_COUNT"
`, nextPort()+"max_restarts = 3\nframework = \"pytorch\"\n[job.env]\nCODE = \"CODEDIR\"\n")
		code := filepath.Join(filepath.Dir(job), "code")
		text, err := os.ReadFile(job)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(job, []byte(strings.Replace(string(text), "CODEDIR", code, 1)), 0o644))
		events := &lineHook{onLine: func(line string) {
			if strings.Contains(line, "attempt 2/4: scan code directory") {
				assert.NoError(t, os.Rename(code+".away", code))
			}
		}}
		res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Events: events})
		require.NoError(t, err)
		t.Logf("events:\n%s", events.String())
		assert.Equal(t, Succeeded, res.Outcome, res.Err)
		assert.Equal(t, 3, res.Attempts)
		assert.Contains(t, events.String(), "attempt 2/4: scan code directory "+code)
		assert.Contains(t, events.String(), "attempt 3/4: restarting the whole group")
		assert.Equal(t, "restart 2\n", readLog(t, res, 3, "worker-1"))
	})

	t.Run("a setup failure on every host is said once, a line per host", func(t *testing.T) {
		job := localJob(t, "exit 0\n", nextPort())
		text, err := os.ReadFile(job)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(job, []byte(strings.Replace(string(text), `command = ["sh", "w.sh"]`, `command = ["no-such-trainer"]`, 1)), 0o644))
		res, _, events := run(t, context.Background(), job)
		require.Equal(t, Failed, res.Outcome)
		var sum bytes.Buffer
		RenderSummary(&sum, res)
		all := events + sum.String()
		t.Logf("summary:\n%s", sum.String())
		for _, h := range []string{"a", "b"} {
			assert.Equal(t, 1, strings.Count(all, "preflight on "+h), "host %s's failure, once:\n%s", h, all)
		}
		assert.NotContains(t, all, `\n`, "no literal newline")
		assert.Regexp(t, `(?m)^failed after 1 attempt\(s\): preflight on [ab].*\n  preflight on [ab].*; logs in `, sum.String())
	})

	t.Run("fatal_exit_codes and retry_exit_codes", func(t *testing.T) {
		res, _, _ := run(t, context.Background(), localJob(t, `if [ "$RANK" = 1 ]; then exit 2; fi; sleep 1000`,
			nextPort()+"fatal_exit_codes = [2]\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.EqualError(t, res.Err, "worker-1@b exited 2; not restarting: exit status 2 is in fatal_exit_codes")

		res, _, events := run(t, context.Background(), localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 75; fi
echo "restart $DROVER_RESTART_COUNT"
`, nextPort()+"restart_policy = \"never\"\nretry_exit_codes = [75]\n"))
		assert.Equal(t, Succeeded, res.Outcome, "75 is retried even under restart_policy = never")
		assert.Equal(t, 2, res.Attempts)
		assert.Contains(t, events, "worker-1@b exited 75")
	})

	t.Run("hang_timeout: a slow start is not a hang", func(t *testing.T) {
		// Silent for 2.5 x hang_timeout before the first line (torch's
		// import on a loaded host), then healthy.
		res, _, events := run(t, context.Background(), localJob(t, `sleep 5; echo up; sleep 0.3; echo done`,
			nextPort()+"hang_timeout = \"2s\"\n"))
		assert.Equal(t, Succeeded, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.NotContains(t, events, "hung")
	})

	t.Run("hangs count against max_host_failures", func(t *testing.T) {
		res, _, events := run(t, context.Background(), localJob(t, `echo up; sleep 1000`,
			nextPort()+"hang_timeout = \"1s\"\nmax_restarts = 0\nmax_host_failures = 1\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 2, res.Attempts, "max_restarts = 0, yet a hang is restarted once")
		assert.Contains(t, events, "attempt 2/2: restarting the whole group")
		assert.ErrorContains(t, res.Err, "no restarts left for lost hosts and hangs (max_host_failures = 1)")
	})

	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		job := localJob(t, `echo ready; sleep 1000`, nextPort())
		go func() {
			// Cancel once both processes are up.
			up := func() bool {
				m, _ := filepath.Glob(filepath.Join(os.Getenv("HOME"), "wd-*", ".drover", "pids", "*.pid"))
				return len(m) == 2
			}
			assert.NoError(t, testenv.Until(2*time.Minute, "both processes' pid files", up))
			cancel(errors.New("interrupt"))
		}()
		start := time.Now()
		res, _, events := run(t, ctx, job)
		assert.Equal(t, Interrupted, res.Outcome)
		assert.EqualError(t, res.Err, "interrupt")
		assert.Contains(t, events, "interrupted; stopping 2 process(es)")
		assert.Less(t, time.Since(start), 30*time.Second)
		for _, p := range res.Processes {
			assert.Equal(t, "143 (SIGTERM)", p.Exit, p.Name)
		}
	})

	t.Run("interrupted before anything started", func(t *testing.T) {
		// Ctrl-C while drover connects, pushes or runs preflight is an
		// interruption (exit 130), not a failed setup (exit 1).
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errors.New("interrupt"))
		res, out, _ := run(t, ctx, localJob(t, `echo should not run`, nextPort()))
		assert.Equal(t, Interrupted, res.Outcome)
		assert.Equal(t, 1, res.Attempts)
		assert.Empty(t, out)
		for _, p := range res.Processes {
			assert.Equal(t, 0, p.Attempts, p.Name)
		}
	})

	t.Run("a host leaving the inventory between attempts is said", func(t *testing.T) {
		// Rank 1's first attempt drops host b from the job file, then
		// fails: the restart runs on a alone.
		job := localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then cp "$SHRUNK" "$JOB"; exit 3; fi
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "world $WORLD_SIZE"
# b's lease is given back: b is no longer the run's.
for i in $(seq 100); do [ -L "$HOME/wd-b/.drover/lease" ] || break; sleep 0.1; done
[ -L "$HOME/wd-b/.drover/lease" ] && echo "b still leased"
exit 0
`, nextPort()+"max_restarts = 2\n")
		data, err := os.ReadFile(job)
		require.NoError(t, err)
		text := string(data)
		shrunk := filepath.Join(filepath.Dir(job), "shrunk.toml")
		require.NoError(t, os.WriteFile(shrunk, []byte(text[:strings.LastIndex(text, "[[host]]")]), 0o644))
		var events bytes.Buffer
		res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Events: &events,
			Env: map[string]string{"JOB": job, "SHRUNK": shrunk}})
		require.NoError(t, err)
		require.Equal(t, Succeeded, res.Outcome, events.String())
		assert.Contains(t, events.String(), "attempt 2/3: b left the inventory: world size 2 -> 1\n")
		assert.Equal(t, "world 1\n", readLog(t, res, 2, "worker-0"), "and no lease left on b")
	})

	t.Run("two runs in one second get their own logs", func(t *testing.T) {
		job := localJob(t, `echo hi`, nextPort())
		now := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
		var dirs []string
		for range 2 {
			res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Now: now})
			require.NoError(t, err)
			require.Equal(t, Succeeded, res.Outcome)
			dirs = append(dirs, res.LogDir)
		}
		base := filepath.Join(filepath.Dir(job), "runs", "local-20260102-030405")
		assert.Equal(t, []string{base, base + "-2"}, dirs)
	})
}

// lineHook is a goroutine-safe events writer that calls onLine with each
// line as it is written.
type lineHook struct {
	mu     sync.Mutex
	buf    strings.Builder
	onLine func(string)
}

func (h *lineHook) Write(p []byte) (int, error) {
	h.mu.Lock()
	h.buf.Write(p)
	h.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		h.onLine(line)
	}
	return len(p), nil
}

func (h *lineHook) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}

// TestWaitDialTimeout: a dial while waiting for a lost host never outlasts
// host_wait by a whole connect timeout (a 2s host_wait used to cost 10s
// more before the spare took over), nor gets less than a second.
func TestWaitDialTimeout(t *testing.T) {
	for _, tc := range []struct{ timeout, left, want time.Duration }{
		{0, time.Minute, cluster.DefaultConnectTimeout},
		{10 * time.Second, time.Minute, 10 * time.Second},
		{10 * time.Second, 3 * time.Second, 3 * time.Second},
		{10 * time.Second, 0, time.Second},
		{10 * time.Second, -time.Second, time.Second},
	} {
		assert.Equal(t, tc.want, waitDialTimeout(tc.timeout, tc.left), "timeout %s, %s left", tc.timeout, tc.left)
	}
}
