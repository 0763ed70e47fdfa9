package sweeprun

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/sweep"
)

// A resumed sweep runs neither its kept trials nor places its adopted
// ones anew: t0 completed before the supervisor died and is kept with its
// metric, t1 was running on h:1 and is followed there, t2 never started
// and runs; the record handed to Persist at the end has all three done.
func TestSweepResumes(t *testing.T) {
	p, err := sweep.ParseParam("--param", "x=1..3")
	require.NoError(t, err)
	trials, err := sweep.Expand([]sweep.Param{p}, 0, 0)
	require.NoError(t, err)
	col, _ := sweep.NewCollector("")
	opts := &sweep.Options{Params: []sweep.Param{p}, Trials: trials, Metric: "loss", Goal: sweep.Minimize, Collector: col, GPUsPerTrial: 1}
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	best := 0.5
	resumed := []Resumed{
		{Record: sweep.TrialRecord{Result: sweep.Result{ID: "t0", State: sweep.Completed, Metric: &best, Steps: 2, Host: "h", GPUs: []int{0}, Started: &started, Ended: &started},
			Series: sweep.Series{{Step: 1, Value: 1}, {Step: 2, Value: best}}}, Action: sweep.Keep, State: sweep.Completed},
		{Record: sweep.TrialRecord{Result: sweep.Result{ID: "t1", State: sweep.Running, Host: "h", GPUs: []int{1}, Started: &started}}, Action: sweep.Adopt, State: sweep.Running},
		{Record: sweep.TrialRecord{Result: sweep.Result{ID: "t2", State: sweep.Running, Host: "h", GPUs: []int{0}}}, Action: sweep.Rerun, State: sweep.Pending},
	}
	var mu sync.Mutex
	ran := map[string]sweep.Placement{}
	var last []sweep.TrialRecord
	s := &Sweep{ID: "sw", Options: opts, Fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0}}}, Resumed: resumed,
		Persist: func(r []sweep.TrialRecord) { mu.Lock(); last = r; mu.Unlock() },
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			mu.Lock()
			ran[spec.Trial.ID] = spec.Placement
			mu.Unlock()
			fmt.Fprintf(spec.Out, "loss=%s\n", spec.Trial.Params["x"])
			return nil
		}}
	out, err := s.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, map[string]sweep.Placement{"t1": sweep.On("h", 1), "t2": sweep.On("h", 0)}, ran,
		"t0 is kept, t1 adopted on its recorded GPU (not in the probed fleet: its run holds it), t2 placed")
	assert.True(t, sweep.Succeeded(out.Report.Trials))
	assert.Equal(t, "t0", out.Report.Best.ID)
	require.Len(t, last, 3)
	for _, r := range last {
		assert.Equal(t, sweep.Completed, r.State, r.ID)
	}
	assert.Equal(t, started, *last[1].Started, "an adopted trial keeps its start")
	assert.Len(t, last[0].Series, 2, "a kept trial keeps its series for the median rule")
}

// A resumed sweep whose adopted trial holds the only GPUs: the look at
// the hosts shows them busy (left out of the fleet) or leased (by the
// trial's own run), yet they are the sweep's; once the adopted trial
// ends, the pending one runs on them.
func TestSweepResumeOnTheAdoptedTrialsGPUs(t *testing.T) {
	for name, look := range map[string]struct{ fleet, free []sweep.HostGPUs }{
		"busy":   {fleet: nil, free: nil},
		"leased": {fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0, 1}}}, free: []sweep.HostGPUs{{Host: "h"}}},
	} {
		t.Run(name, func(t *testing.T) {
			opts := gridOpts(t, 2, 0)
			opts.GPUsPerTrial = 2
			started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			resumed := []Resumed{
				{Record: sweep.TrialRecord{Result: sweep.Result{ID: "t0", State: sweep.Running, Host: "h", GPUs: []int{0, 1}, Started: &started}},
					Action: sweep.Adopt, State: sweep.Running},
				{Record: sweep.TrialRecord{Result: sweep.Result{ID: "t1", State: sweep.Pending}}, Action: sweep.Rerun, State: sweep.Pending},
			}
			var mu sync.Mutex
			var ran []string
			s := &Sweep{ID: "sw", Options: opts, Fleet: look.fleet, Free: look.free, Resumed: resumed,
				RunTrial: func(ctx context.Context, spec TrialSpec) error {
					mu.Lock()
					ran = append(ran, spec.Trial.ID+"@"+spec.Placement.String())
					mu.Unlock()
					fmt.Fprintln(spec.Out, "loss=1")
					return nil
				}}
			out, err := s.Run(context.Background())
			require.NoError(t, err)
			assert.Equal(t, []string{"t0@h:0,1", "t1@h:0,1"}, ran)
			assert.True(t, sweep.Succeeded(out.Report.Trials), "%+v", out.Report.Trials)
		})
	}
}

// An adopted trial's output may repeat what its record's series holds
// (from another machine, its whole log): each step counts once, so the
// median rule's running average is the trial's.
func TestSweepAdoptedSeriesCountsEachStepOnce(t *testing.T) {
	opts := gridOpts(t, 1, 0)
	started := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	resumed := []Resumed{{Record: sweep.TrialRecord{
		Result: sweep.Result{ID: "t0", State: sweep.Running, Host: "h", GPUs: []int{0}, Started: &started},
		Series: sweep.Series{{Step: 1, Value: 5}, {Step: 2, Value: 4}, {Step: 3, Value: 3}}}, Action: sweep.Adopt, State: sweep.Running}}
	var mu sync.Mutex
	var last []sweep.TrialRecord
	s := &Sweep{ID: "sw", Options: opts, Fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0}}}, Resumed: resumed,
		Persist: func(r []sweep.TrialRecord) { mu.Lock(); last = r; mu.Unlock() },
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			for step := 1; step <= 5; step++ {
				fmt.Fprintf(spec.Out, "[worker-0@h] step=%d loss=%d\n", step, 6-step)
			}
			return nil
		}}
	out, err := s.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, last, 1)
	assert.Equal(t, sweep.Series{{Step: 1, Value: 5}, {Step: 2, Value: 4}, {Step: 3, Value: 3}, {Step: 4, Value: 2}, {Step: 5, Value: 1}}, last[0].Series)
	assert.Equal(t, 5, out.Report.Trials[0].Steps)
}
