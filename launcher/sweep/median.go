package sweep

import "slices"

// Goal is the direction of the objective.
type Goal string

// The goals.
const (
	Minimize Goal = "minimize"
	Maximize Goal = "maximize"
)

// ParseGoal reads --goal.
func ParseGoal(source, s string) (Goal, error) {
	switch Goal(s) {
	case "", Minimize:
		return Minimize, nil
	case Maximize:
		return Maximize, nil
	}
	return "", errorf(source, "write minimize or maximize", "unknown goal %q", s)
}

// Better reports whether a beats b under the goal.
func (g Goal) Better(a, b float64) bool {
	if g == Maximize {
		return a > b
	}
	return a < b
}

// Best returns the best value of s under the goal, as Katib's default
// metric strategy takes a trial's objective (min when minimizing, max
// when maximizing), and false when s is empty.
func (g Goal) Best(s Series) (float64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	best := s[0].Value
	for _, p := range s[1:] {
		if g.Better(p.Value, best) {
			best = p.Value
		}
	}
	return best, true
}

// DefaultMinTrials is the median rule's default: it stops nothing until
// that many trials have completed.
const DefaultMinTrials = 3

// Median is Katib's median stopping rule.
type Median struct {
	Goal Goal
	// MinTrials completed trials are needed before any trial is stopped
	// (DefaultMinTrials when 0).
	MinTrials int
}

// ShouldStop reports whether the running trial whose observations are
// running is to be stopped, given the completed trials' observations:
// once MinTrials have completed, at the running trial's last step s, its
// best value so far is compared with the median of the completed
// trials' running averages up to step s (each the mean of its values at
// steps ≤ s), and a worse value stops it. A completed trial that
// reported nothing by step s has no average there and is left out; with
// fewer than MinTrials averages the rule stops nothing yet.
func (m Median) ShouldStop(running Series, completed []Series) bool {
	min := m.MinTrials
	if min <= 0 {
		min = DefaultMinTrials
	}
	if len(completed) < min || len(running) == 0 {
		return false
	}
	s := running.Steps()
	var avgs []float64
	for _, c := range completed {
		sum, n := 0.0, 0
		for _, p := range c {
			if p.Step <= s {
				sum += p.Value
				n++
			}
		}
		if n > 0 {
			avgs = append(avgs, sum/float64(n))
		}
	}
	if len(avgs) < min {
		return false
	}
	best, _ := m.Goal.Best(running)
	med := median(avgs)
	return m.Goal.Better(med, best)
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
