package longrun

import (
	"regexp"
	"strconv"
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

// adoptInForeground starts a detached run of 2 hosts, SIGKILLs its
// supervisor, and has a foreground drover run adopt the group: the same
// attempt and processes, the message printed, the new supervisor alive.
func adoptInForeground(t *testing.T) (*kit.FleetJob, *kit.DroverProc) {
	t.Helper()
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2, Job: "max_restarts = 3"})
	sup := kit.StartDetachedRun(t, j)
	before := kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))

	fg := kit.StartDrover(t, j)
	adopting := regexp.MustCompile(`adopting attempt 1 of run ` + before.RunID + ` \(supervisor \S+ pid ` + strconv.Itoa(sup) + ` gone since \d\d:\d\d:\d\d\)`)
	testenv.Wait(t, 60*time.Second, "the adoption", func() (bool, string) {
		if adopting.MatchString(fg.Stderr.String()) {
			return true, ""
		}
		select {
		case <-fg.Done:
			t.Fatalf("the foreground drover exited %d before adopting:\n%s", fg.Code, fg.Stderr.String())
		default:
		}
		return false, "\n" + fg.Stderr.String()
	})
	// Its lines are streamed as a foreground run's.
	fg.WaitOutput(t, regexp.MustCompile(`(?m)^\[worker-1@\S+\] n=\d+ rank=1 `), 30*time.Second)
	after := kit.WaitStatus(t, j, 30*time.Second, "the foreground supervisor", func(st runview.RunStatus) bool { return st.Supervisor.Alive })
	assert.Equal(t, fg.Cmd.Process.Pid, after.Supervisor.PID)
	assert.Equal(t, 1, after.Attempt, "adopted, not restarted")
	assert.Equal(t, 0, after.Restarts)
	require.Equal(t, 2, kit.Running(after))
	for i := range before.Processes {
		assert.Equal(t, before.Processes[i].PID, after.Processes[i].PID, "the same processes, not restarted")
	}
	return j, fg
}

// A foreground drover run adopts an unsupervised detached group as
// drover run -d does, and Ctrl-C then stops every process of the job.
func TestRunForegroundAdoptsThenCtrlC(t *testing.T) {
	j, fg := adoptInForeground(t)
	fg.Signal(t, syscall.SIGINT)
	assert.Equal(t, kit.ExitInterrupted, fg.Wait(t, 60*time.Second))
	kit.WaitNoJobProcs(t, j.Name, 10*time.Second)
	assert.Equal(t, agent.RunStopped, kit.Status(t, j).State)
}

// A foreground supervisor leaves nothing behind when it is SIGKILLed,
// adopted group included: its attach clients switched the detached
// agents to the foreground heartbeat, so they stop the group a few
// seconds later (a detached run's agents would keep it for ever).
func TestRunForegroundAdoptsThenSIGKILL(t *testing.T) {
	j, fg := adoptInForeground(t)
	fg.Signal(t, syscall.SIGKILL)
	fg.Wait(t, 10*time.Second)
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second)
}
