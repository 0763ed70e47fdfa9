package e2e

// Fleet tests of how `drover run` judges an attempt's end in its first
// hour's cases: a clean finish whose channel is lost after the exits
// (issue 37, item 2) and a script that fails every rank the same way at
// start (item 5).

import (
	"fmt"
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
)

// A clean exit is never a lost host: worker-1 freezes the sshd process
// that carries its channel (SIGSTOP) and exits 0, so its agent records
// the exit and ends but sshd never sends the exit status; once the agent
// is gone, the test kills that sshd, and drover sees the channel (and the
// whole connection) close without an exit status. drover asks the
// agent's record over a new connection and the run succeeds in one
// attempt. Before the record was asked, the host was declared lost and the
// whole group restarted.
func TestRunCleanExitChannelLost(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$RANK" = 1 ] && [ "$DROVER_RESTART_COUNT" = 0 ]; then
	p=$$
	while [ "$p" -gt 1 ]; do
		p=$(sed 's/.*) . \([0-9]*\) .*/\1/' /proc/$p/stat)
		case "$(cat /proc/$p/comm)" in sshd*) break;; esac
	done
	kill -STOP "$p"
	echo "$p" > sshd-stopped
fi
exit 0
`, Job: "max_restarts = 2"})
	d := kit.StartDrover(t, j)
	var sshd int
	testenv.Wait(t, 60*time.Second, "worker-1 to stop its sshd", func() (bool, string) {
		out, err := kit.HostFile(t, 1, j.Workdir+"/sshd-stopped")
		sshd, _ = strconv.Atoi(strings.TrimSpace(out))
		return err == nil && sshd > 0, fmt.Sprintf("%q %v", out, err)
	})
	t.Cleanup(func() { _ = syscall.Kill(sshd, syscall.SIGKILL) })
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second, 1)
	require.NoError(t, syscall.Kill(sshd, syscall.SIGKILL))

	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "attempt 1/3: the channel of worker-1@"+fleet.Hosts[1].Name+" closed without its exit status")
	assert.Contains(t, stderr, "its agent's record says it exited 0")
	assert.Contains(t, stderr, "attempt 1/3: job "+j.Name+" succeeded")
	assert.NotContains(t, stderr, "restarting")
	assert.NotContains(t, stderr, "attempt 2/")
}

// A misspelled script fails every rank the same way at start: drover
// stops after the first attempt and says so, naming restart_policy and
// how to retry anyway, instead of spending max_restarts.
func TestRunSameStartFailureStops(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["python3", "trainn.py"]`, Job: "max_restarts = 5"})
	d := kit.StartDrover(t, j)
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "a failure at start: the others get 3s to end on their own before the group stops")
	assert.Contains(t, stderr, "every process (2) of the first attempt failed the same way at start, before any progress (exit status 2")
	assert.Contains(t, stderr, "trainn.py")
	assert.Contains(t, stderr, `restart_policy = "on-failure"; fix the error, or to retry anyway add 2 to retry_exit_codes`)
	assert.NotContains(t, stderr, "attempt 2/")
}
