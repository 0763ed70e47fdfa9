package main

// Fleet tests of how `drover run` recovers from what is not the job's
// fault: a controller that was suspended (Ctrl-Z), a host unreachable when
// the run starts.

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/testfleet"
)

// Issue 21, item 9: Ctrl-Z on drover for longer than the agents'
// heartbeat timeout makes every agent stop its group. That is said as
// such and is not the job's failure: with max_restarts = 0 the job still
// restarts (it counts against max_host_failures) and succeeds.
func TestRunControllerSuspendedIsNotAFailure(t *testing.T) {
	testfleet.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 0\nmax_host_failures = 1"})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0$`), 2, 60*time.Second)
	// Ctrl-Z at a terminal sends SIGTSTP, which stops drover; here drover
	// runs in an orphaned process group, where the kernel discards
	// SIGTSTP, so SIGSTOP stands in for it (same effect: drover stops).
	d.signal(t, syscall.SIGSTOP)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// The agents hear no heartbeat and stop their groups on their own.
	waitNoJobProcs(t, j.Name, 30*time.Second, 0, 1)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGCONT))
	resumed = true
	require.Equal(t, 0, d.wait(t, 60*time.Second), "stderr:\n%s", d.stderr.String())
	stderr := d.stderr.String()
	assert.Regexp(t, `attempt 1/1: controller stopped sending heartbeats for \d+s`, stderr)
	assert.NotRegexp(t, `exited 143 \(SIGTERM\); stopping`, stderr, "the agents' stop is not reported as the job's failure")
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded")
	for i := range 2 {
		assert.Contains(t, j.logFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("done rank=%d\n", i))
	}
	assert.Empty(t, jobProcs(t, j.Name))
}

// Issue 21, item 11: on the first attempt too, an unreachable host is
// waited for host_wait rather than failing at once with "no spare host
// left".
func TestRunFirstAttemptWaitsForUnreachableHost(t *testing.T) {
	testfleet.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: "echo \"hello rank=$RANK\"\n", Job: `host_wait = "90s"`})
	h := fleet.ClusterHosts()[1]
	require.NoError(t, fleet.Cut(1))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(1))
		}
	})
	d := startDrover(t, j)
	want := fmt.Sprintf("%s (%s) unreachable, waiting up to 1m30s for it", h.Name, h.Address)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(d.stderr.String(), want) {
		select {
		case <-d.done:
			t.Fatalf("drover exited %d instead of waiting for %s:\n%s", d.code, h.Name, d.stderr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "drover does not wait for %s:\n%s", h.Name, d.stderr.String())
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, fleet.Heal(1))
	healed = true
	require.Equal(t, 0, d.wait(t, 120*time.Second), "stderr:\n%s", d.stderr.String())
	stderr := d.stderr.String()
	assert.Contains(t, stderr, fmt.Sprintf("%s (%s) is back", h.Name, h.Address))
	assert.NotContains(t, stderr, "no spare host left")
	assert.Contains(t, d.stdout.String(), fmt.Sprintf("[worker-1@%s] hello rank=1\n", h.Name))
}
