package sweeprun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/sweep"
)

// trainer is a stand-in trial: loss = k/step for 20 steps, k = 1 for lr
// 0.001 and 2 for lr 0.01, plus seed/1000 from step 10 on; lr 1.0 prints
// a constant loss until it is stopped. It records which GPUs each trial
// held and when, to check that no two overlap.
type trainer struct {
	mu   sync.Mutex
	held map[string]int // host:gpu → trials on it now
	max  int
	used map[string]bool
	env  map[string]map[string]string
}

func (tr *trainer) run(ctx context.Context, s TrialSpec) error {
	tr.mu.Lock()
	for _, g := range s.Placement.Hosts[0].GPUs {
		k := fmt.Sprintf("%s:%d", s.Placement.Host(), g)
		tr.held[k]++
		tr.max = max(tr.max, tr.held[k])
		tr.used[k] = true
	}
	tr.env[s.Trial.ID] = s.Env
	tr.mu.Unlock()
	defer func() {
		tr.mu.Lock()
		for _, g := range s.Placement.Hosts[0].GPUs {
			tr.held[fmt.Sprintf("%s:%d", s.Placement.Host(), g)]--
		}
		tr.mu.Unlock()
	}()
	lr, seed := s.Env["DROVER_PARAM_LR"], s.Env["DROVER_PARAM_SEED"]
	sd, _ := strconv.Atoi(seed)
	for step := 1; ; step++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		loss := 5.0
		switch lr {
		case "0.001", "0.01":
			if step > 20 {
				return nil
			}
			k := 1.0
			if lr == "0.01" {
				k = 2
			}
			loss = k / float64(step)
			if step >= 10 {
				loss += float64(sd) / 1000
			}
		}
		fmt.Fprintf(s.Out, "[worker-0@%s] step=%d loss=%g\n", s.Placement.Host(), step, loss)
	}
}

func TestSweepRunsEveryTrialOncePerGPUAndStopsTheDiverging(t *testing.T) {
	lr, err := sweep.ParseParam("--param", "lr=0.001,0.01,1.0")
	require.NoError(t, err)
	seed, err := sweep.ParseParam("--param", "seed=0..3")
	require.NoError(t, err)
	trials, err := sweep.Expand([]sweep.Param{lr, seed}, 0, 0)
	require.NoError(t, err)
	col, err := sweep.NewCollector("")
	require.NoError(t, err)
	opts := &sweep.Options{Params: []sweep.Param{lr, seed}, Trials: trials, Metric: "loss", Goal: sweep.Minimize,
		Collector: col, EarlyStop: &sweep.Median{Goal: sweep.Minimize, MinTrials: 3}, GPUsPerTrial: 1}
	tr := &trainer{held: map[string]int{}, used: map[string]bool{}, env: map[string]map[string]string{}}
	var table strings.Builder
	s := &Sweep{ID: "sw1", Options: opts, Command: []string{"python3", "train.py", "--lr={lr}"},
		Fleet:    []sweep.HostGPUs{{Host: "h0", GPUs: []int{0, 1}}, {Host: "h1", GPUs: []int{0, 1}}, {Host: "h2", GPUs: []int{0, 1}}},
		RunTrial: tr.run, Table: &table}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.Run(ctx)
	require.NoError(t, err)
	rep := out.Report
	require.Len(t, rep.Trials, 12)
	assert.Equal(t, 1, tr.max, "never two trials on one GPU")
	assert.Len(t, tr.used, 6, "every GPU used")
	for _, r := range rep.Trials {
		switch r.Params["lr"] {
		case "1.0":
			assert.Equal(t, sweep.Stopped, r.State, r.ID)
		case "0.001":
			assert.Equal(t, sweep.Completed, r.State, r.ID)
			assert.Equal(t, 20, r.Steps, r.ID)
		}
		require.NotNil(t, r.Started, r.ID)
		require.NotNil(t, r.Ended, r.ID)
		assert.Equal(t, "sw1", tr.env[r.ID]["DROVER_SWEEP_ID"])
		assert.Equal(t, r.ID, tr.env[r.ID]["DROVER_TRIAL_ID"])
	}
	assert.True(t, sweep.Succeeded(rep.Trials))
	require.NotNil(t, rep.Best)
	assert.Equal(t, map[string]string{"lr": "0.001", "seed": "0"}, rep.Best.Params)
	assert.Equal(t, 24, strings.Count(table.String(), "\n"), "a line as each trial starts and ends:\n%s", table.String())
}

// A failed trial is failed in the report with its error, and the others run.
func TestSweepFailedTrial(t *testing.T) {
	p, err := sweep.ParseParam("--param", "x=1..3")
	require.NoError(t, err)
	trials, err := sweep.Expand([]sweep.Param{p}, 0, 0)
	require.NoError(t, err)
	col, _ := sweep.NewCollector("")
	opts := &sweep.Options{Params: []sweep.Param{p}, Trials: trials, Metric: "loss", Goal: sweep.Minimize, Collector: col, GPUsPerTrial: 1, MaxParallel: 1}
	boom := errors.New("exit status 3")
	running := 0
	s := &Sweep{ID: "sw", Options: opts, Fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0, 1, 2}}},
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			running++ // MaxParallel 1: no two at once, so no race
			defer func() { running-- }()
			if running > 1 {
				return errors.New("two trials at once")
			}
			fmt.Fprintf(spec.Out, "loss=%s\n", spec.Trial.Params["x"])
			if spec.Trial.Params["x"] == "2" {
				return boom
			}
			return nil
		}}
	out, err := s.Run(context.Background())
	require.NoError(t, err)
	assert.False(t, sweep.Succeeded(out.Report.Trials))
	assert.ErrorIs(t, out.Errors["t1"], boom)
	assert.Len(t, out.Errors, 1)
	assert.Equal(t, "t0", out.Report.Best.ID)
}

func TestTrialConfig(t *testing.T) {
	cfg := &config.Config{InventoryPath: "/x/inv.toml",
		Job: config.Job{Name: "j", Workdir: "runs/j", Command: []string{"old"}, MinGPUs: 2, MaxHostFailures: 3, Env: map[string]string{"A": "1"}},
		Hosts: []config.Host{{Name: "h0", Workdir: "runs/j", GPUs: config.GPUSpec{Auto: true}},
			{Name: "h1", Workdir: "/abs/j", GPUs: config.GPUSpec{Auto: true}, MinGPUs: 2, Spare: true}}}
	spec := TrialSpec{Trial: sweep.Trial{ID: "t03"}, Command: []string{"python3", "train.py", "--lr=0.1"},
		Env: map[string]string{"DROVER_TRIAL_ID": "t03"}, Placement: sweep.On("h1", 1)}
	require.NoError(t, TrialConfig(spec)(cfg))
	assert.Equal(t, []config.Host{{Name: "h1", Workdir: "/abs/j/trials/t03", GPUs: config.GPUSpec{List: []int{1}}}}, cfg.Hosts)
	assert.Equal(t, "j-t03", cfg.Job.Name)
	assert.Equal(t, "runs/j/trials/t03", cfg.Job.Workdir)
	assert.Equal(t, 0, cfg.Job.MinGPUs)
	assert.Equal(t, 0, cfg.Job.MaxHostFailures, "the sweep moves a trial off a lost host")
	assert.Equal(t, spec.Command, cfg.Job.Command)
	assert.Equal(t, map[string]string{"A": "1"}, cfg.Job.Env, "DROVER_* is refused in [job.env]: the trial's env goes in RunOptions.Env")

	cfg.Hosts = []config.Host{{Name: "h0", Workdir: "w", GPUs: config.GPUSpec{Auto: true}}, {Name: "h1", Workdir: "w"}, {Name: "h2", Workdir: "w"}}
	cfg.Job.MinHosts = 1
	two := TrialSpec{Trial: sweep.Trial{ID: "t1"}, Placement: sweep.Placement{Hosts: []sweep.HostGPUs{{Host: "h2", GPUs: []int{0, 1}}, {Host: "h0", GPUs: []int{2, 3}}}}}
	require.NoError(t, TrialConfig(two)(cfg))
	assert.Equal(t, []config.Host{{Name: "h2", Workdir: "w/trials/t1", GPUs: config.GPUSpec{List: []int{0, 1}}},
		{Name: "h0", Workdir: "w/trials/t1", GPUs: config.GPUSpec{List: []int{2, 3}}}}, cfg.Hosts, "a group of the placement's hosts, in its order")
	assert.Equal(t, 0, cfg.Job.MinHosts, "a lost host ends the trial's run: no smaller group")

	err := TrialConfig(TrialSpec{Trial: sweep.Trial{ID: "t1"}, Placement: sweep.On("gone")})(cfg)
	assert.ErrorContains(t, err, "gone")
}

func TestStripPrefix(t *testing.T) {
	assert.Equal(t, "step=1 loss=2", stripPrefix("[worker-0@h1] step=1 loss=2"))
	assert.Equal(t, "[note] loss=2", stripPrefix("[note] loss=2"))
}

// gridOpts is a sweep of n trials (x=1..n), one GPU each.
func gridOpts(t *testing.T, n, maxParallel int) *sweep.Options {
	p, err := sweep.ParseParam("--param", fmt.Sprintf("x=1..%d", n))
	require.NoError(t, err)
	trials, err := sweep.Expand([]sweep.Param{p}, 0, 0)
	require.NoError(t, err)
	col, err := sweep.NewCollector("")
	require.NoError(t, err)
	return &sweep.Options{Params: []sweep.Param{p}, Trials: trials, Metric: "loss", Goal: sweep.Minimize, Collector: col,
		GPUsPerTrial: 1, MaxParallel: maxParallel}
}

// A trial placed on a GPU that another run leased meanwhile is no
// failure: it gives the GPU back, the sweep keeps off that GPU until a
// look at the hosts' leases finds it free, and the trial runs then. (The
// trial on the other GPU runs until the other run has ended, so only a
// look can free GPU 0.)
func TestSweepWaitsForAnotherRunsLease(t *testing.T) {
	var mu sync.Mutex
	otherHolds, conflicts, looks := true, 0, 0
	released := make(chan struct{})
	var ran []string
	s := &Sweep{ID: "sw", Options: gridOpts(t, 3, 0), Fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0, 1}}},
		RefreshEvery: time.Millisecond,
		Refresh: func(ctx context.Context) ([]sweep.HostGPUs, error) {
			mu.Lock()
			defer mu.Unlock()
			looks++
			if looks == 3 {
				otherHolds = false // the other run ends
				close(released)
			}
			if otherHolds {
				return []sweep.HostGPUs{{Host: "h", GPUs: []int{1}}}, nil
			}
			return []sweep.HostGPUs{{Host: "h", GPUs: []int{0, 1}}}, nil
		},
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			mu.Lock()
			if spec.Placement.Hosts[0].GPUs[0] == 0 && otherHolds {
				conflicts++
				mu.Unlock()
				return &sweep.SetbackError{Setback: sweep.LeaseConflict, Host: "h", Err: errors.New("GPU 0 is leased by another run")}
			}
			ran = append(ran, fmt.Sprintf("%s@%d", spec.Trial.ID, spec.Placement.Hosts[0].GPUs[0]))
			mu.Unlock()
			select {
			case <-released:
			case <-ctx.Done():
				return ctx.Err()
			}
			fmt.Fprintln(spec.Out, "loss=1")
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.Run(ctx)
	require.NoError(t, err)
	assert.Empty(t, out.Errors)
	for _, r := range out.Report.Trials {
		assert.Equal(t, sweep.Completed, r.State, r.ID)
	}
	assert.Equal(t, 1, conflicts, "after the conflict no trial is placed on GPU 0 until a look finds it free")
	assert.GreaterOrEqual(t, looks, 3)
	// t0 runs on GPU 0 once the look finds it free; t2 on whichever GPU
	// frees first after that (every trial ends once the other run has).
	// The order of the entries is not asserted: t0 is placed before t2,
	// but each trial's run starts in a goroutine of its own, so t2's may
	// record itself first.
	require.Len(t, ran, 3)
	assert.Contains(t, ran, "t1@1")
	assert.Contains(t, ran, "t0@0", "t0 waits for GPU 0 while t1 holds GPU 1")
}

// A trial whose host is lost moves to another host while its
// max_host_failures lasts, and the lost host gets no other trial; past
// it, the trial fails saying why; with every host lost the sweep ends.
func TestSweepMovesTrialsOffLostHosts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fleet    []sweep.HostGPUs
		policy   sweep.Policy
		failed   []string
		why      string
		runErr   string
		onLostH0 int    // trials that started on h0
		said     string // in the table's lines
	}{
		{name: "moved", fleet: []sweep.HostGPUs{{Host: "h0", GPUs: []int{0}}, {Host: "h1", GPUs: []int{0}}},
			policy: sweep.Policy{MaxHostFailures: 1}, onLostH0: 1,
			said: "t0 gives h0:0 back: host lost on h0: h0 lost; h0 is left out of the sweep, and the trial moves to another host (moves left after this one: 0 of the job's max_host_failures = 1)"},
		{name: "no host failures allowed", fleet: []sweep.HostGPUs{{Host: "h0", GPUs: []int{0}}, {Host: "h1", GPUs: []int{0}}},
			failed: []string{"t0"}, why: "max_host_failures = 0", onLostH0: 1},
		{name: "every host lost", fleet: []sweep.HostGPUs{{Host: "h0", GPUs: []int{0}}}, policy: sweep.Policy{MaxHostFailures: 3},
			runErr: "no host left", onLostH0: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			onH0 := 0
			var table strings.Builder
			s := &Sweep{ID: "sw", Options: gridOpts(t, 2, 0), Fleet: tc.fleet, Policy: tc.policy, Table: &table,
				RunTrial: func(ctx context.Context, spec TrialSpec) error {
					mu.Lock()
					defer mu.Unlock()
					if spec.Placement.Host() == "h0" {
						onH0++
						return &sweep.SetbackError{Setback: sweep.HostLost, Host: "h0", Err: errors.New("h0 lost")}
					}
					fmt.Fprintln(spec.Out, "loss=1")
					return nil
				}}
			out, err := s.Run(context.Background())
			if tc.runErr != "" {
				require.ErrorContains(t, err, tc.runErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.onLostH0, onH0)
			assert.Contains(t, table.String(), tc.said)
			var failed []string
			for id, e := range out.Errors {
				failed = append(failed, id)
				assert.ErrorContains(t, e, tc.why)
			}
			assert.ElementsMatch(t, tc.failed, failed)
			if tc.runErr == "" {
				for _, r := range out.Report.Trials {
					if !slices.Contains(tc.failed, r.ID) {
						assert.Equal(t, sweep.Completed, r.State, r.ID)
						assert.Equal(t, "h1", r.Host, r.ID)
					}
				}
			}
		})
	}
}

// Trials of two hosts each: a run on a group that lost a host without
// naming it leaves out the hosts a fresh look no longer finds, and the
// trial moves to two others.
func TestSweepTrialsOfTwoHosts(t *testing.T) {
	opts := gridOpts(t, 2, 0)
	opts.HostsPerTrial = 2
	var mu sync.Mutex
	var runs []string
	lost := false
	s := &Sweep{ID: "sw", Options: opts, Policy: sweep.Policy{MaxHostFailures: 1},
		Fleet: []sweep.HostGPUs{{Host: "h0", GPUs: []int{0}}, {Host: "h1", GPUs: []int{0}}, {Host: "h2", GPUs: []int{0}}},
		Refresh: func(ctx context.Context) ([]sweep.HostGPUs, error) {
			return []sweep.HostGPUs{{Host: "h1", GPUs: []int{0}}, {Host: "h2", GPUs: []int{0}}}, nil // h0 answers no more
		},
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, spec.Trial.ID+"@"+spec.Placement.String())
			if !lost {
				lost = true
				return &sweep.SetbackError{Setback: sweep.HostLost, Err: errors.New("a host of the group was lost")}
			}
			fmt.Fprintln(spec.Out, "loss=1")
			return nil
		}}
	out, err := s.Run(context.Background())
	require.NoError(t, err)
	assert.Empty(t, out.Errors)
	assert.Equal(t, []string{"t0@h0:0+h1:0", "t0@h1:0+h2:0", "t1@h1:0+h2:0"}, runs, "one trial at a time: three hosts of one GPU hold one group of two")
	for _, r := range out.Report.Trials {
		assert.Equal(t, sweep.Completed, r.State, r.ID)
		assert.Equal(t, []sweep.HostGPUs{{Host: "h1", GPUs: []int{0}}, {Host: "h2", GPUs: []int{0}}}, r.Hosts, r.ID)
		assert.Equal(t, "h1", r.Host, r.ID)
	}
}

// Ctrl-C or drover sweep stop (the sweep's ctx cancelled) stops the
// running trials: their runs end in an error (they were stopped), and
// they are recorded stopped, not failed, with no failure to report; the
// trial that never started stays pending.
func TestSweepStoppedTrialsAreNotFailed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	started := 0
	s := &Sweep{ID: "sw", Options: gridOpts(t, 3, 0), Fleet: []sweep.HostGPUs{{Host: "h", GPUs: []int{0, 1}}},
		RunTrial: func(ctx context.Context, spec TrialSpec) error {
			fmt.Fprintln(spec.Out, "loss=1")
			mu.Lock()
			if started++; started == 2 {
				cancel()
			}
			mu.Unlock()
			<-ctx.Done()
			return errors.New("exit status 143 (stopped)")
		}}
	out, err := s.Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, out.Errors, "a stopped trial is no failure")
	states := map[string]sweep.State{}
	for _, r := range out.Report.Trials {
		states[r.ID] = r.State
		if r.State == sweep.Interrupted {
			assert.NotNil(t, r.Ended, r.ID)
		}
	}
	assert.Equal(t, map[string]sweep.State{"t0": sweep.Interrupted, "t1": sweep.Interrupted, "t2": sweep.Pending}, states)
}
