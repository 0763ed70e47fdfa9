package e2e

// Fleet tests of how `drover run` recovers from what is not the job's
// fault (a controller that was suspended, Ctrl-Z) and how it does not wait
// for what is a mistake (a host unreachable when the run starts).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// Issue 21, item 9: Ctrl-Z on drover for longer than the agents'
// heartbeat timeout makes every agent stop its group. That is said as
// such and is not the job's failure: with max_restarts = 0 the job still
// restarts (it counts against max_host_failures) and succeeds.
func TestRunControllerSuspendedIsNotAFailure(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 0\nmax_host_failures = 1"})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0$`), 2, 60*time.Second)
	// Ctrl-Z at a terminal sends SIGTSTP, which stops drover; here drover
	// runs in an orphaned process group, where the kernel discards
	// SIGTSTP, so SIGSTOP stands in for it (same effect: drover stops).
	d.Signal(t, syscall.SIGSTOP)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = d.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// The agents hear no heartbeat and stop their groups on their own.
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second, 0, 1)
	require.NoError(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	resumed = true
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Regexp(t, `attempt 1/1: controller stopped sending heartbeats for \d+s`, stderr)
	assert.NotRegexp(t, `exited 143 \(SIGTERM\); stopping`, stderr, "the agents' stop is not reported as the job's failure")
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded")
	for i := range 2 {
		assert.Contains(t, j.LogFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("done rank=%d\n", i))
	}
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Issue 37, item 5: a host this run never reached fails the run within
// seconds, naming the host, its address and the fix, instead of being
// waited for host_wait (90 s here) in silence: an address that answers
// nothing (a link cut, as with a wrong address routed nowhere: the dial
// times out) or that no host has (no route to it). This reverses issue 21,
// item 11, which this test asserted before under the name
// TestRunFirstAttemptWaitsForUnreachableHost (the first attempt waited
// host_wait for such a host and ran once it was healed); a host that the
// run reached before is still waited for (TestRunHostCutAndHealed).
func TestRunFirstAttemptFailsFastForUnreachableHost(t *testing.T) {
	fleettest.Need(t, fleet)
	for _, tc := range []struct{ name, how string }{{"cut", "timed out"}, {"no host there", "no route to host"}} {
		t.Run(tc.name, func(t *testing.T) {
			j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: "echo \"hello rank=$RANK\"\n", Job: `host_wait = "90s"`})
			hosts := fleet.ClusterHosts()[:2]
			if tc.name == "cut" {
				require.NoError(t, fleet.Cut(1))
				t.Cleanup(func() { assert.NoError(t, fleet.Heal(1)) })
			} else {
				hosts[1].Address = fleet.SpareAddr(61)
				kit.WriteInventory(t, j.Inventory, hosts)
			}
			h := hosts[1]
			d := kit.StartDrover(t, j)
			require.Equal(t, kit.ExitFailed, d.Wait(t, 30*time.Second), "drover fails within 30 s")
			stderr := d.Stderr.String()
			assert.Contains(t, stderr, fmt.Sprintf("connect to %s (%s:22): %s", h.Name, h.Address, tc.how))
			assert.Contains(t, stderr, fmt.Sprintf("%s (%s) was never reached by this run, so drover does not wait host_wait for it: check its address and port in %s (`ssh %s` must connect)",
				h.Name, h.Address, j.Inventory, h.Address))
			assert.NotContains(t, stderr, "waiting up to")
			assert.NotContains(t, d.Stdout.String(), "hello rank=0", "nothing started")
		})
	}
}

// Issue 15: on a hang, a host that has py-spy gets `py-spy dump --pid PID`
// for every rank, and each stack lands in that rank's log on this machine.
// Real py-spy cannot be installed on the test machines: a stand-in on the
// hosts' PATH (pushed with the code, PATH set in [job.env]) records its
// arguments and prints a made-up stack naming the pid it was asked about.
func TestRunHangStacksWithPySpy(t *testing.T) {
	fleettest.Need(t, fleet)
	name := "runhangstackswithpyspy"
	bin := "/home/" + fleet.User + "/drover-test/" + name + "/bin"
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `exec python3 -c 'import os, time
print("rank pid %d" % os.getpid(), flush=True)
time.sleep(1000)'
`, Job: fmt.Sprintf("hang_timeout = \"3s\"\nmax_restarts = 0\nmax_host_failures = 0\n\n[job.env]\nPATH = %q", bin+":/usr/bin:/bin")})
	require.Equal(t, name, j.Name)
	pyspy := "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/calls\"\necho 'Thread 0x7f00 (idle): \"MainThread\"'\necho \"    all_reduce (train.py:42) of pid $3\"\n"
	require.NoError(t, os.MkdirAll(filepath.Join(j.Dir, "code", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "bin", "py-spy"), []byte(pyspy), 0o755))

	d := kit.StartDrover(t, j)
	assert.NotEqual(t, 0, d.Wait(t, 120*time.Second), "a hang with no restart left fails the job")
	assert.Contains(t, d.Stderr.String(), "group hung")
	for i := range 2 {
		log := j.LogFile(t, 1, fmt.Sprintf("worker-%d", i))
		m := regexp.MustCompile(`rank pid (\d+)`).FindStringSubmatch(log)
		require.NotNil(t, m, "worker-%d's log:\n%s", i, log)
		pid := m[1]
		assert.Contains(t, log, "stack of Python process "+pid+" (py-spy):", "worker-%d's log", i)
		assert.Contains(t, log, "all_reduce (train.py:42) of pid "+pid)
		assert.NotContains(t, log, "Fatal Python error", "py-spy, not faulthandler")
		calls, err := os.ReadFile(filepath.Join(fleet.Dir, "hosts", fleet.Hosts[i].Name, "home", "drover-test", name, "bin", "calls"))
		require.NoError(t, err)
		assert.Equal(t, "dump --pid "+pid+"\n", string(calls), "py-spy's arguments on %s", fleet.Hosts[i].Name)
	}
}
