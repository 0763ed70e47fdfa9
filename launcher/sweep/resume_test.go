package sweep

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestResumeTrial(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state State
		seen  RunSeen
		want  Resume
		as    State
	}{
		{"completed is kept", Completed, RunSeen{}, Keep, Completed},
		{"early-stopped is kept", Stopped, RunSeen{Found: true, Alive: true}, Keep, Stopped},
		{"failed is kept", Failed, RunSeen{}, Keep, Failed},
		{"pending runs", Pending, RunSeen{}, Rerun, Pending},
		{"stopped by the sweep's end runs again", Interrupted, RunSeen{Found: true, Over: true}, Rerun, Pending},
		{"running with a live run is adopted", Running, RunSeen{Found: true, Alive: true}, Adopt, Running},
		{"running whose run succeeded unwatched is completed", Running, RunSeen{Found: true, Exited: true, Succeeded: true}, Keep, Completed},
		{"running whose run succeeded and recorded it", Running, RunSeen{Found: true, Over: true, Succeeded: true}, Keep, Completed},
		{"running whose run failed unwatched is failed", Running, RunSeen{Found: true, Exited: true}, Keep, Failed},
		{"running whose record is final failed", Running, RunSeen{Found: true, Over: true}, Keep, Failed},
		{"running that left no run runs again", Running, RunSeen{}, Rerun, Pending},
		{"running whose run has nothing alive nor exited runs again", Running, RunSeen{Found: true}, Rerun, Pending},
		{"a foreground trial stopped with its supervisor runs again", Running, RunSeen{Found: true, Exited: true, Lost: true}, Rerun, Pending},
		{"a foreground trial that succeeded before its supervisor died is kept", Running, RunSeen{Found: true, Exited: true, Succeeded: true, Lost: true}, Keep, Completed},
		{"running whose host shows an older sweep's run runs again", Running,
			RunSeen{Found: true, Over: true, Succeeded: true, RunStarted: time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)}, Rerun, Pending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Date(2026, 1, 1, 12, 0, 0, 500, time.UTC)
			if tc.seen.RunStarted.IsZero() {
				tc.seen.RunStarted = started.Truncate(time.Second)
			}
			got, as := ResumeTrial(Result{ID: "t0", State: tc.state, Started: &started}, tc.seen)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.as, as)
		})
	}
}

func testOptions(t *testing.T) *Options {
	p, err := ParseParam("--param", "x=1..3")
	if err != nil {
		t.Fatal(err)
	}
	trials, err := Expand([]Param{p}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &Options{Params: []Param{p}, Trials: trials, Metric: "loss", Goal: Minimize, GPUsPerTrial: 1}
}

func TestCheckRecord(t *testing.T) {
	o := testOptions(t)
	good := func() *Record {
		r := &Record{Version: RecordVersion, ID: "j-20260101-000000", Key: o.Key(nil), State: SweepRunning, Goal: Minimize, Params: []string{"x"}}
		for _, tr := range o.Trials {
			r.Trials = append(r.Trials, TrialRecord{Result: Result{ID: tr.ID, State: Pending}})
		}
		return r
	}
	assert.NoError(t, CheckRecord(good(), o))
	assert.NoError(t, CheckRecord(good(), nil), "without the options, as sweep status reads it")
	group := good()
	group.Trials[0].State, group.Trials[0].Host, group.Trials[0].GPUs = Running, "h", []int{0, 1}
	group.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0, 1}}, {Host: "g", GPUs: []int{0, 1}}}
	group.Trials[1].State = Interrupted
	assert.NoError(t, CheckRecord(group, o), "a trial of two hosts, as Place records it; a trial the sweep's end stopped")
	for name, spoil := range map[string]func(*Record){
		"version":      func(r *Record) { r.Version = 9 },
		"id with path": func(r *Record) { r.ID = "../x" },
		"state":        func(r *Record) { r.State = "odd" },
		"fewer trials": func(r *Record) { r.Trials = r.Trials[:2] },
		"trial id":     func(r *Record) { r.Trials[1].ID = "t9" },
		"trial state":  func(r *Record) { r.Trials[0].State = "bogus" },
		"gpu":          func(r *Record) { r.Trials[0].GPUs = []int{-1} },
		"series":       func(r *Record) { r.Trials[0].Series = make(Series, MaxRecordSeries+1) },
		"goal":         func(r *Record) { r.Goal = "up" },
		"param name":   func(r *Record) { r.Params = []string{"a b"} },
		"escape":       func(r *Record) { r.Trials[0].Params = map[string]string{"x": "\x1b[2J"} },
		"host":         func(r *Record) { r.Trials[0].Host = "../h" },
		"group host":   func(r *Record) { r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {Host: "../h"}} },
		"group gpu": func(r *Record) {
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {Host: "g", GPUs: []int{-2}}}
		},
		"group's first host is not the trial's": func(r *Record) {
			r.Trials[0].Host, r.Trials[0].GPUs = "g", []int{0}
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {Host: "g", GPUs: []int{0}}}
		},
		"group's first GPUs are not the trial's": func(r *Record) {
			r.Trials[0].Host, r.Trials[0].GPUs = "h", []int{1}
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {Host: "g", GPUs: []int{0}}}
		},
		"group of one": func(r *Record) {
			r.Trials[0].Host, r.Trials[0].GPUs = "h", []int{0}
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}}
		},
		"group host twice": func(r *Record) {
			r.Trials[0].Host, r.Trials[0].GPUs = "h", []int{0}
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {Host: "h", GPUs: []int{1}}}
		},
		"group host unnamed": func(r *Record) {
			r.Trials[0].Host, r.Trials[0].GPUs = "h", []int{0}
			r.Trials[0].Hosts = []HostGPUs{{Host: "h", GPUs: []int{0}}, {GPUs: []int{1}}}
		},
		"GPU twice":              func(r *Record) { r.Trials[0].Host, r.Trials[0].GPUs = "h", []int{1, 1} },
		"GPUs on no host":        func(r *Record) { r.Trials[0].GPUs = []int{0} },
		"running on no host":     func(r *Record) { r.Trials[0].State = Running },
		"steps below 0":          func(r *Record) { r.Trials[0].Steps = -1 },
		"key":                    func(r *Record) { r.Key = "not hex\n" },
		"supervisor pid below 0": func(r *Record) { r.SupervisorPid = -1 },
	} {
		r := good()
		spoil(r)
		assert.Error(t, CheckRecord(r, o), name)
	}
}

func TestKeyChangesWithTheSweep(t *testing.T) {
	o := testOptions(t)
	k := o.Key([]string{"python3", "t.py", "{x}"})
	assert.Equal(t, k, testOptions(t).Key([]string{"python3", "t.py", "{x}"}), "the same command, the same key")
	assert.NotEqual(t, k, o.Key([]string{"python3", "u.py", "{x}"}))
	o.Trials[0].Params["x"] = "7"
	assert.NotEqual(t, k, o.Key([]string{"python3", "t.py", "{x}"}))
}

func TestSupervisorGone(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	// Process 42, started at tick 1000, runs here.
	alive := func(pid int, start uint64) bool { return pid == 42 && (start == 0 || start == 1000) }
	s := Supervision{Here: "laptop", Alive: alive, Now: now}
	assert.False(t, s.SupervisorGone(&Record{SupervisorHost: "laptop", SupervisorPid: 42, Updated: now.Add(-time.Hour)}), "a live pid here")
	assert.False(t, s.SupervisorGone(&Record{SupervisorHost: "laptop", SupervisorPid: 42, SupervisorStart: 1000, Updated: now.Add(-time.Hour)}),
		"the supervisor's pid and start")
	assert.True(t, s.SupervisorGone(&Record{SupervisorHost: "laptop", SupervisorPid: 42, SupervisorStart: 999, Updated: now}),
		"its pid taken by a later process: the supervisor is gone")
	assert.True(t, s.SupervisorGone(&Record{SupervisorHost: "laptop", SupervisorPid: 43, Updated: now}), "a dead pid here")
	assert.False(t, s.SupervisorGone(&Record{SupervisorHost: "other", SupervisorPid: 43, Updated: now.Add(-StaleAfter / 2)}), "written lately elsewhere")
	assert.True(t, s.SupervisorGone(&Record{SupervisorHost: "other", SupervisorPid: 42, Updated: now.Add(-2 * StaleAfter)}), "silent elsewhere")
}
