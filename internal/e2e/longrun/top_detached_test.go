package longrun

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/runview"
	"github.com/droverhq/drover/launcher/top"
)

// drover top and drover status give a detached run's process the same
// output age: both read the log the run writes on the host
// (.drover/runs/ID/attempt-N/), by the host's clock. (top read only a
// foreground run's .drover/logs/, and showed no age, or a stale log's.)
func TestTopDetachedOutputAgeAgreesWithStatus(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "echo one line\nexec sleep 600\n", Hosts: 1})
	kit.StartDetachedRun(t, j)
	// The log stops growing after its one line: ages only grow from then.
	var st runview.RunStatus
	var asked time.Time // just before the status that is compared
	testenv.Wait(t, 30*time.Second, "status to show the process quiet for 2 s", func() (bool, string) {
		asked = time.Now()
		st = kit.Status(t, j)
		return kit.Running(st) == 1 && st.Processes[0].LastOutputAgeS >= 2, fmt.Sprintf("%+v", st)
	})
	var v top.View
	require.NoError(t, json.Unmarshal(kit.RunTop(t, j, "--once", "--json"), &v))
	since := time.Since(asked).Seconds()
	require.Len(t, v.Hosts, 1)
	require.Len(t, v.Hosts[0].Procs, 1)
	age := v.Hosts[0].Procs[0].OutputAgeS
	// status was asked first and rounds down to 0.1 s; top after it.
	assert.GreaterOrEqual(t, age, st.Processes[0].LastOutputAgeS, "top's age is older than status's, read before it")
	assert.LessOrEqual(t, age, st.Processes[0].LastOutputAgeS+0.1+since, "top's age is at most status's plus the time between them")

	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}
