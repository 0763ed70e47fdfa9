package agent

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The states are an interface (state files, run records, `drover status
// --json`, `drover ps --json`): each encodes as its plain string, and
// Final holds for exactly the states that never change again.
func TestProcStateFinalAndJSON(t *testing.T) {
	for _, tc := range []struct {
		state ProcState
		json  string
		final bool
	}{
		{ProcStarting, `"starting"`, false},
		{ProcRunning, `"running"`, false},
		{ProcExited, `"exited"`, true},
		{ProcStopped, `"stopped"`, true},
		{ProcFailed, `"failed"`, true},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			assert.Equal(t, tc.final, tc.state.Final())
			assert.Equal(t, tc.final, (&State{State: tc.state}).Final(), "State.Final")
			data, err := json.Marshal(tc.state)
			require.NoError(t, err)
			assert.Equal(t, tc.json, string(data))
			var back ProcState
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, tc.state, back)
		})
	}
}

func TestRunStateFinalAndJSON(t *testing.T) {
	for _, tc := range []struct {
		state RunState
		json  string
		final bool
	}{
		{RunStarting, `"starting"`, false},
		{RunRunning, `"running"`, false},
		{RunRestarting, `"restarting"`, false},
		{RunSucceeded, `"succeeded"`, true},
		{RunFailed, `"failed"`, true},
		{RunStopped, `"stopped"`, true},
		{RunUnsupervised, `"unsupervised"`, false},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			assert.Equal(t, tc.final, tc.state.Final())
			data, err := json.Marshal(RunRecord{State: tc.state})
			require.NoError(t, err)
			assert.Contains(t, string(data), `"state":`+tc.json)
			var back RunRecord
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Equal(t, tc.state, back.State)
		})
	}
}
