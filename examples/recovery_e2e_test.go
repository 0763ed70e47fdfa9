package examples_test

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

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hangRecoveryLimit is the bound from a frozen rank to the
// restarted group: hang_timeout (10 s), the stacks, the stop, the restart.
const hangRecoveryLimit = 60 * time.Second

// TestFleetRecovery trains examples/pytorch-ddp on three fleet hosts (two
// ranks each) and disturbs it in ways that are not the training's fault:
// a rank frozen with SIGSTOP (the others then block in all_reduce, and
// only hang_timeout notices), and the rendezvous port held by another
// process when the group restarts. Each run must end with the parameters
// of an undisturbed run, bit for bit.
func TestFleetRecovery(t *testing.T) {
	needFleet(t)
	var ref string
	reference := func(t *testing.T) string {
		t.Helper()
		if ref == "" {
			ref = runUndisturbed(t, "pytorch")
		}
		return ref
	}

	t.Run("hang", func(t *testing.T) {
		want := reference(t)
		var frozenAt time.Time
		freeze := func(t *testing.T, j *fleetJob, r *droverRun) {
			t.Helper()
			p := findRank(t, "pytorch", 1, 3)
			waitRank0Line(t, j, r, regexp.MustCompile(`(?m)^step 20 loss=`))
			require.NoError(t, syscall.Kill(p.pid, syscall.SIGSTOP))
			frozenAt = time.Now()
			testenv.SignalAtCleanup(t, p.pid, syscall.SIGCONT, false)
			t.Logf("kill -STOP %d (rank 3) on %s after the step-20 checkpoint", p.pid, fleet.Hosts[1].Name)
			findRestarted(t, 1, r)
			took := time.Since(frozenAt)
			t.Logf("group restarted %s after the freeze", took.Round(100*time.Millisecond))
			assert.Less(t, took, hangRecoveryLimit, "a frozen rank restarts the group within %s", hangRecoveryLimit)
		}
		run := runDisturbed(t, "pytorch", want, freeze, `hang_timeout = "10s"`)
		events := readLog(t, filepath.Join(run, "events.log"))
		assert.Regexp(t, `attempt 1/3: group hung: no process showed progress for \d+s \(hang_timeout = 10s\); the last was worker-\d@\S+ at [0-9:.]+; asking every Python process for its stack`, events)
		second := readLog(t, filepath.Join(run, "attempt-2", "worker-0.log"))
		m := resumedRE.FindStringSubmatch(second)
		require.NotNil(t, m)
		step, _ := strconv.Atoi(m[2])
		assert.GreaterOrEqual(t, step, 20, "resumed from the step-20 checkpoint or later")
		// The frozen rank's stack, in its own log: faulthandler's dump
		// with train.py's frames.
		frozen := readLog(t, filepath.Join(run, "attempt-1", "worker-3.log"))
		assert.Regexp(t, `(?s)Fatal Python error: Aborted.*File "[^"]*train\.py", line \d+ in main`, frozen)
	})

	t.Run("port-held", func(t *testing.T) {
		want := reference(t)
		var port string
		hold := func(t *testing.T, j *fleetJob, r *droverRun) {
			t.Helper()
			port = envValue(findRank(t, "pytorch", 0, 0).env, "MASTER_PORT")
			require.NotEmpty(t, port)
			holdPort(t, 0, port)
			// A rank dies; once rank 0 has let go of the port, the holder
			// takes it, so the restart finds it held.
			killRank("pytorch", 1, 3)(t, j, r)
		}
		run := runDisturbed(t, "pytorch", want, hold)
		events := readLog(t, filepath.Join(run, "events.log"))
		m := regexp.MustCompile(fmt.Sprintf(`attempt 2/3: port\(s\) %s held on %s; this attempt uses (\d+)`, port, fleet.Hosts[0].Name)).FindStringSubmatch(events)
		require.NotNil(t, m, "the restart says which port it used; events:\n%s", events)
		assert.NotEqual(t, port, m[1])
	})
}

// waitRank0Line waits until rank 0's log of the first attempt (on this
// machine, as drover writes it) has a line matching re.
func waitRank0Line(t *testing.T, j *fleetJob, r *droverRun, re *regexp.Regexp) {
	t.Helper()
	// Every 20 ms: the caller acts on the line (freezes a rank) while it
	// is the last one.
	testenv.WaitEvery(t, 20*time.Millisecond, checkpointTimeout, "rank 0 to log "+re.String(), func() bool {
		if r.finished() {
			t.Fatalf("drover exited before rank 0 logged %s; output:\n%s", re, r.output())
		}
		m, _ := filepath.Glob(filepath.Join(j.dir, "runs", "*", "attempt-1", j.rank0Log()))
		if len(m) == 1 {
			if b, err := os.ReadFile(m[0]); err == nil && re.Match(b) {
				return true
			}
		}
		return false
	})
}

// holdPort starts a process on fleet host i that takes TCP port as soon as
// it is free and keeps it (SO_REUSEADDR, so that connections of the
// previous holder in TIME_WAIT do not keep it out).
func holdPort(t *testing.T, i int, port string) {
	t.Helper()
	script := strings.Join([]string{
		"import socket, time",
		"s = socket.socket()",
		"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
		"while True:",
		"    try:",
		"        s.bind(('', " + port + ")); break",
		"    except OSError:",
		"        time.sleep(0.02)",
		"s.listen()",
		"time.sleep(600)",
	}, "\n")
	out, err := fleet.Exec(i, "sh", "-c", hostPython+` -c "$0" >/dev/null 2>&1 & echo $!`, script)
	require.NoError(t, err, "start the port holder: %s", out)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "holder pid %q", out)
	testenv.SignalAtCleanup(t, pid, syscall.SIGKILL, false)
}
