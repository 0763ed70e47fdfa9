package sweep

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func f(v float64) *float64 { return &v }

func TestRankAndJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	trials := []Result{
		{ID: "t0", Params: map[string]string{"lr": "1.0"}, State: Stopped, Metric: f(2.3), Steps: 4, Host: "a", GPUs: []int{0}, Started: &at, Ended: &at},
		{ID: "t1", Params: map[string]string{"lr": "0.1"}, State: Failed},
		{ID: "t2", Params: map[string]string{"lr": "0.001"}, State: Completed, Metric: f(0.1), Steps: 9, Host: "b", GPUs: []int{1}, Started: &at, Ended: &at},
		{ID: "t3", Params: map[string]string{"lr": "0.01"}, State: Completed, Metric: f(0.1), Steps: 9},
	}
	rep := Rank(trials, Minimize)
	var ids []string
	for _, r := range rep.Trials {
		ids = append(ids, r.ID)
	}
	assert.Equal(t, []string{"t2", "t3", "t0", "t1"}, ids, "best first, a tie by id, no metric last")
	require.NotNil(t, rep.Best)
	assert.Equal(t, Best{ID: "t2", Params: map[string]string{"lr": "0.001"}, Metric: 0.1}, *rep.Best)
	assert.Equal(t, "t0", Rank(trials, Maximize).Best.ID)
	assert.Equal(t, "t0", trials[0].ID, "Rank leaves its argument alone")

	b, err := json.Marshal(Report{Trials: trials[:2], Best: rep.Best})
	require.NoError(t, err)
	assert.JSONEq(t, `{"trials": [
		{"id": "t0", "params": {"lr": "1.0"}, "state": "early-stopped", "metric": 2.3, "steps": 4, "host": "a", "gpus": [0], "started": "2026-01-02T03:04:05Z", "ended": "2026-01-02T03:04:05Z"},
		{"id": "t1", "params": {"lr": "0.1"}, "state": "failed", "metric": null, "steps": 0, "host": "", "gpus": null, "started": null, "ended": null}],
		"best": {"id": "t2", "params": {"lr": "0.001"}, "metric": 0.1}}`, string(b))

	assert.Nil(t, Rank(trials[1:2], Minimize).Best)
	assert.False(t, Succeeded(trials))
	assert.True(t, Succeeded([]Result{trials[0], trials[2]}))
}
