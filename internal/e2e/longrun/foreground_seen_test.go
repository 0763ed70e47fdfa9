package longrun

import (
	"encoding/json"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
)

// Issue 37, every run visible from any terminal: during a foreground
// drover run on 3 hosts (2 ranks each), from other directories, drover
// status shows 6 running, logs --rank 1 prints rank 1's lines, attach
// follows the run, ps lists it, and drover stop ends it: the foreground
// drover exits as on Ctrl-C, saying who stopped it.
func TestRunForegroundSeenFromAnotherTerminal(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 3, Job: "procs_per_host = 2"})
	fg := kit.StartDrover(t, j)

	// Until the run's record is on its hosts (once its processes
	// started), status says there is no run: poll through that.
	var st runview.RunStatus
	testenv.Wait(t, 60*time.Second, "status to show 6 running", func() (bool, string) {
		out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "status", j.Path, "--json")
		if code != 0 {
			return false, errs
		}
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		return kit.Running(st) == 6, out
	})
	assert.Equal(t, agent.RunRunning, st.State)
	assert.True(t, st.Foreground, "status says a foreground drover supervises it")
	assert.True(t, st.Supervisor.Alive, "supervisor: %+v", st.Supervisor)
	assert.Equal(t, fg.Cmd.Process.Pid, st.Supervisor.PID)
	assert.Equal(t, 1, st.Attempt)
	text, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "status", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, text, "foreground drover run")

	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "logs", j.Path, "--rank", "1")
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `(?m)^\[worker-1@\S+\] n=\d+ rank=1 `, out)
	assert.NotRegexp(t, `rank=[^1]`, out)

	att := kit.StartDroverArgs(t, j, "attach", j.Path)
	att.WaitOutput(t, regexp.MustCompile(`(?m)^\[worker-4@\S+\] n=\d+ rank=4 `), 30*time.Second)
	att.Signal(t, syscall.SIGINT)
	require.Equal(t, 0, att.Wait(t, 10*time.Second))

	kit.AssertPs(t, j, st.RunID)

	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "asked the foreground supervisor")
	require.Equal(t, kit.ExitInterrupted, fg.Wait(t, 30*time.Second), "stderr:\n%s", fg.Stderr.String())
	assert.Regexp(t, `stopped by drover stop from \S+@\S+ \(stop\): stopping every process`, fg.Stderr.String())
	assert.Regexp(t, `stopped by drover stop from \S+@\S+ in attempt 1; logs in `, fg.Stderr.String())
	kit.WaitNoJobProcs(t, j.Name, 10*time.Second)
	after := kit.Status(t, j)
	assert.Equal(t, agent.RunStopped, after.State)
	assert.Equal(t, 0, kit.Running(after))

	// drover ps lists live runs only; --all keeps the stopped one.
	for _, tc := range []struct {
		args   []string
		listed bool
	}{{[]string{"ps", "--json"}, false}, {[]string{"ps", "--json", "--all"}, true}} {
		out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, tc.args...)
		require.Equal(t, 0, code, "%v: %s", tc.args, errs)
		var rows []hostio.PsRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		var found *hostio.PsRow
		for i := range rows {
			if rows[i].RunID == st.RunID {
				found = &rows[i]
			}
		}
		if !tc.listed {
			assert.Nil(t, found, "%v lists the stopped run: %s", tc.args, out)
			continue
		}
		require.NotNil(t, found, "%v: %s", tc.args, out)
		assert.Equal(t, agent.RunStopped, found.State)
		assert.True(t, found.Foreground)
	}
}
