package sweep

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Reading is one value of a metric read from a trial's output.
type Reading struct {
	Name  string
	Value float64
	// Step is the line's step=N, or -1 when the line has none.
	Step int
}

// Collector reads metrics from output lines, as Katib's stdout collector
// does: NAME=VALUE pairs, several to a line, separated by spaces, commas
// or semicolons, with step=N on the same line giving their step. A
// custom regexp (--metric-regex) replaces the pairs' form: its groups
// "name" and "value" (or, unnamed, the first and second) are a pair,
// and a "step" group the step.
type Collector struct {
	re *regexp.Regexp
}

// pairRE is the default form; the value is a float as Go and Python
// print one.
var pairRE = regexp.MustCompile(`(?:^|[\s,;])([A-Za-z_][A-Za-z0-9_./-]*)\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan|Inf|NaN))(?:$|[\s,;])`)

// NewCollector returns the default collector, or one for regex when it
// is not empty.
func NewCollector(regex string) (*Collector, error) {
	if regex == "" {
		return &Collector{re: pairRE}, nil
	}
	re, err := regexp.Compile(regex)
	if err != nil {
		return nil, errorf("--metric-regex", `write a Go regexp with groups for the name and the value: (?P<name>\w+)=(?P<value>\S+)`,
			"%q is not a regexp: %v", regex, err)
	}
	if re.NumSubexp() < 2 && !(re.SubexpIndex("name") > 0 && re.SubexpIndex("value") > 0) {
		return nil, errorf("--metric-regex", `give it two groups, the name and the value: (?P<name>\w+)=(?P<value>\S+)`,
			"%q has %d groups, not a name and a value", regex, re.NumSubexp())
	}
	return &Collector{re: re}, nil
}

// Line returns the readings of one output line; step=N is not reported as
// a metric of its own, it is their step.
func (c *Collector) Line(line string) []Reading {
	ni, vi := c.re.SubexpIndex("name"), c.re.SubexpIndex("value")
	if ni < 0 || vi < 0 {
		ni, vi = 1, 2
	}
	si := c.re.SubexpIndex("step")
	step := -1
	var out []Reading
	// The default form's pairs share their separators: match at every
	// separator, not only after the previous match.
	for _, m := range c.allMatches(line) {
		if si > 0 && m[si] != "" {
			if n, err := strconv.Atoi(m[si]); err == nil {
				step = n
			}
		}
		name := m[ni]
		v, err := strconv.ParseFloat(strings.TrimSpace(m[vi]), 64)
		if err != nil {
			continue
		}
		if name == "step" && v >= 0 && v == math.Trunc(v) {
			step = int(v)
			continue
		}
		out = append(out, Reading{Name: name, Value: v})
	}
	for i := range out {
		out[i].Step = step
	}
	return out
}

func (c *Collector) allMatches(line string) [][]string {
	if c.re != pairRE {
		return c.re.FindAllStringSubmatch(line, -1)
	}
	var all [][]string
	for start := 0; start < len(line); {
		loc := c.re.FindStringSubmatchIndex(line[start:])
		if loc == nil {
			break
		}
		m := make([]string, len(loc)/2)
		for i := range m {
			if loc[2*i] >= 0 {
				m[i] = line[start+loc[2*i] : start+loc[2*i+1]]
			}
		}
		all = append(all, m)
		// Resume at the value's end, so the separator after it starts the
		// next pair.
		start += loc[5]
	}
	return all
}

// Point is one observation of the objective: its step and value.
type Point struct {
	Step  int
	Value float64
}

// Series is one trial's observations of the objective, in the order
// reported. A report without a step takes the next one after the last.
type Series []Point

// Add records the readings of one line that name metric.
func (s *Series) Add(metric string, reps []Reading) {
	for _, r := range reps {
		if r.Name != metric || math.IsNaN(r.Value) {
			continue
		}
		step := r.Step
		if step < 0 {
			step = len(*s)
			if n := len(*s); n > 0 {
				step = (*s)[n-1].Step + 1
			}
		}
		*s = append(*s, Point{Step: step, Value: r.Value})
	}
}

// Last returns the last value reported and whether there is one.
func (s Series) Last() (float64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	return s[len(s)-1].Value, true
}

// Steps returns the last step reported (0 with none).
func (s Series) Steps() int {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Step
}

// Replay drops the repeats in an adopted trial's output. A resumed sweep
// follows an adopted trial's run from where the record's series ends,
// but the adoption passes on what the run's log holds past this
// machine's copy of it: from another machine the whole log, on this one
// what the dead supervisor had read but not yet recorded. Reports whose
// step is known (step=N) and not past Last (the record's last step) are
// repeats of points the series has, and dropped, until the first report
// past it: after that the run's own restarts may repeat steps, as any
// trial's do. A report without a step cannot be matched to the record:
// it is kept, counted on from the record's last step.
type Replay struct {
	Last int
	done bool
}

// Filter returns the readings of reps that are no repeat.
func (r *Replay) Filter(reps []Reading) []Reading {
	if r == nil || r.done {
		return reps
	}
	var out []Reading
	for _, p := range reps {
		switch {
		case r.done || p.Step < 0:
			out = append(out, p)
		case p.Step > r.Last:
			r.done = true
			out = append(out, p)
		}
	}
	return out
}
