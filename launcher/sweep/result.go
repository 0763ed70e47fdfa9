package sweep

import (
	"cmp"
	"slices"
	"time"
)

// State is where a trial stands.
type State string

// The states of a trial. Completed and Stopped (by early stopping) are
// the good ends; a sweep whose trials all end in one of them exits 0.
// Interrupted is a trial that the sweep's own end stopped (Ctrl-C, or
// `drover sweep stop`): not a failure of the trial, nor a result.
const (
	Pending     State = "pending"
	Running     State = "running"
	Completed   State = "completed"
	Stopped     State = "early-stopped"
	Interrupted State = "stopped"
	Failed      State = "failed"
)

// Result is one trial as `drover sweep --json` reports it.
type Result struct {
	ID     string            `json:"id"`
	Params map[string]string `json:"params"`
	State  State             `json:"state"`
	// Metric is the trial's objective (its best value of the metric), nil
	// until it reported one.
	Metric *float64 `json:"metric"`
	Steps  int      `json:"steps"`
	// Host and GPUs are where the trial runs (its first host, for a
	// trial of several hosts); Hosts lists every host of a trial of
	// several (--hosts-per-trial), with its GPUs.
	Host    string     `json:"host"`
	GPUs    []int      `json:"gpus"`
	Hosts   []HostGPUs `json:"hosts,omitempty"`
	Started *time.Time `json:"started"`
	Ended   *time.Time `json:"ended"`
}

// Place records p as where the trial runs.
func (r *Result) Place(p Placement) {
	r.Host, r.GPUs, r.Hosts = p.Host(), nil, nil
	if len(p.Hosts) > 0 {
		r.GPUs = p.Hosts[0].GPUs
	}
	if len(p.Hosts) > 1 {
		r.Hosts = p.Hosts
	}
}

// Placement is where the trial runs, as Place recorded it.
func (r Result) Placement() Placement {
	if len(r.Hosts) > 0 {
		return Placement{Hosts: r.Hosts}
	}
	if r.Host == "" {
		return Placement{}
	}
	return On(r.Host, r.GPUs...)
}

// Best is the report's best trial.
type Best struct {
	ID     string            `json:"id"`
	Params map[string]string `json:"params"`
	Metric float64           `json:"metric"`
}

// Report is `drover sweep --json`'s object: the trials ranked by the
// objective, and the best of them (nil when no trial reported the
// metric).
type Report struct {
	Trials []Result `json:"trials"`
	Best   *Best    `json:"best"`
}

// Rank returns the trials sorted by the objective under goal, the best
// first; trials without a metric follow, in id order, as do ties.
func Rank(trials []Result, goal Goal) Report {
	r := slices.Clone(trials)
	slices.SortStableFunc(r, func(a, b Result) int {
		switch {
		case a.Metric == nil && b.Metric == nil:
			return cmp.Compare(a.ID, b.ID)
		case a.Metric == nil:
			return 1
		case b.Metric == nil:
			return -1
		case goal.Better(*a.Metric, *b.Metric):
			return -1
		case goal.Better(*b.Metric, *a.Metric):
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	rep := Report{Trials: r}
	if len(r) > 0 && r[0].Metric != nil {
		rep.Best = &Best{ID: r[0].ID, Params: r[0].Params, Metric: *r[0].Metric}
	}
	return rep
}

// Succeeded reports whether every trial completed or was stopped early:
// drover sweep's exit 0.
func Succeeded(trials []Result) bool {
	for _, t := range trials {
		if t.State != Completed && t.State != Stopped {
			return false
		}
	}
	return true
}
