package config

import "fmt"

// Straggler is what the run does about a rank far slower than its peers
// (docs/health.md#stragglers): the keys straggler_factor,
// straggler_clock_factor and on_straggler.
type Straggler struct {
	// Factor is how many times its peers' median CPU time per step a
	// rank spends, or how many times slower than theirs it steps, to be
	// named; 0 turns these signals off.
	Factor float64
	// ClockFactor is how many times below its peers' median SM clock a
	// rank's GPU runs to be named; 0 turns the clock signal off.
	ClockFactor float64
	// On is on_straggler: StragglerWarn names the rank in an event;
	// StragglerReplace also restarts the group at its next checkpoint
	// with a free spare in place of the rank's host.
	On string
}

// The straggler watch's defaults: conservative, so that the ordinary
// spread of a healthy group (a rank 0 that logs, a data loader's burst)
// names nobody.
const (
	DefaultStragglerFactor      = 3.0
	DefaultStragglerClockFactor = 1.5
	// StragglerWarn names the rank (an event, a notification, drover
	// status).
	StragglerWarn = "warn"
	// StragglerReplace names it too and, when a spare host is free,
	// restarts the group at its next checkpoint with the spare in place
	// of the straggler's host.
	StragglerReplace = "replace"
)

// stragglerFields are the straggler watch's keys.
var stragglerFields = []field{
	{"straggler_factor", `straggler_factor = 3.0`},
	{"straggler_clock_factor", `straggler_clock_factor = 1.5`},
	{"on_straggler", `on_straggler = "warn"`},
}

// stragglerReader reads a job's straggler keys: a concern of its own,
// beside jobReader's.
type stragglerReader struct{ *walker }

// read reads the keys over the defaults (defaultJob).
func (w stragglerReader) read(t tbl, j *Job) {
	if f, ok := w.factor(t, "straggler_factor", 1.5); ok {
		j.Straggler.Factor = f
	}
	if f, ok := w.factor(t, "straggler_clock_factor", 1.1); ok {
		j.Straggler.ClockFactor = f
	}
	if s, ok := w.str(t, "on_straggler"); ok {
		switch s {
		case StragglerWarn, StragglerReplace:
			j.Straggler.On = s
		default:
			w.add(t.key("on_straggler"), fmt.Sprintf("unknown value %q", s), `write on_straggler = "warn" or "replace"`)
		}
	}
}

// factor reads a number that is 0 (off) or at least least: a factor
// nearer 1 would name a healthy group's ordinary spread.
func (w stragglerReader) factor(t tbl, name string, least float64) (float64, bool) {
	v, ok := t.m[name]
	if !ok {
		return 0, false
	}
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case int64:
		f = float64(n)
	default:
		w.typeErr(t, name, "a number", v)
		return 0, false
	}
	if f != 0 && !(f >= least) { // !(>=) also refuses NaN
		w.add(t.key(name), fmt.Sprintf("%v is too small: it must be 0 (off) or at least %v", f, least), "write "+t.schema.example(name))
		return 0, false
	}
	return f, true
}
