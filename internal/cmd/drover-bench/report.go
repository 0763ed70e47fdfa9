package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Unit says how a Measure's Value is to be read and printed.
type Unit int

// Units of measures.
const (
	Seconds Unit = iota // Value in seconds
	MiB                 // Value in mebibytes
	Percent             // Value in percent of one CPU core
	RTT                 // Value in round trips (a time divided by the round-trip time)
	Count               // Value is a plain number (of round trips counted, hosts...)
	Millis              // Value in milliseconds (CPU per host, per connection)
	Ratio               // Value is a ratio of two figures (wall time / CPU floor)
)

// Measure is one figure of the table: a median over N runs, or the reason
// why there is none. A missing figure is a row that says why, never a
// silently dropped row.
type Measure struct {
	Value float64
	Unit  Unit
	// N is how many runs the median was taken over.
	N int
	// NA, when set, says why there is no figure (the command is missing,
	// failed, or the budget ran out).
	NA string
}

// OK reports whether m holds a figure.
func (m Measure) OK() bool { return m.NA == "" && m.N > 0 }

func na(format string, args ...any) Measure {
	return Measure{NA: fmt.Sprintf(format, args...)}
}

// String prints a figure so that it reads at a glance: milliseconds below
// a second, seconds above.
func (m Measure) String() string {
	if !m.OK() {
		if m.NA == "" {
			return "n/a"
		}
		return "n/a (" + m.NA + ")"
	}
	switch m.Unit {
	case MiB:
		return fmt.Sprintf("%.1f MiB", m.Value)
	case Percent:
		return fmt.Sprintf("%.1f %%", m.Value)
	case RTT:
		return fmt.Sprintf("%.1f RTT", m.Value)
	case Count:
		return fmt.Sprintf("%.1f", m.Value)
	case Millis:
		return fmt.Sprintf("%.1f ms", m.Value)
	case Ratio:
		return fmt.Sprintf("%.2fx", m.Value)
	default:
		if m.Value < 1 {
			return fmt.Sprintf("%.0f ms", m.Value*1000)
		}
		return fmt.Sprintf("%.2f s", m.Value)
	}
}

// medianOf is the median of durations as a Measure in seconds.
func medianOf(ds []time.Duration) Measure {
	if len(ds) == 0 {
		return na("no runs")
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var med time.Duration
	if n := len(s); n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Measure{Value: med.Seconds(), Unit: Seconds, N: len(ds)}
}

// Target is what a row must achieve. A speedup target compares drover with
// the baseline of the same row (baseline / drover, both measured in the
// same run); a limit target is an absolute ceiling on drover's figure.
type Target struct {
	// MinSpeedup: drover must be at least this many times faster.
	MinSpeedup float64
	// Max: drover's figure must stay below this (in seconds, or in Unit).
	Max  float64
	Unit Unit
}

// String prints the target as it appears in the table.
func (t Target) String() string {
	switch {
	case t.MinSpeedup == 1:
		return "no slower"
	case t.MinSpeedup > 0 && t.MinSpeedup < 1:
		return fmt.Sprintf("< %gx baseline", 1/t.MinSpeedup)
	case t.MinSpeedup > 0:
		return fmt.Sprintf(">= %gx faster", t.MinSpeedup)
	case t.Max > 0:
		return "< " + Measure{Value: t.Max, Unit: t.Unit, N: 1}.String()
	}
	return "-"
}

// Row is one line of the results table.
type Row struct {
	Section string // "fan-out", "push", "failure", "resources"
	N       int    // hosts
	What    string // what was measured, e.g. "first push"
	Drover  Measure
	// Baseline is empty for rows without one (failure handling, memory).
	Baseline     string
	BaselineTime Measure
	Target       Target
}

// Ratio is baseline / drover ("how many times faster drover is"), or NaN
// when either figure is missing or there is no baseline.
func (r Row) Ratio() float64 {
	if r.Baseline == "" || !r.Drover.OK() || !r.BaselineTime.OK() || r.Drover.Value <= 0 {
		return math.NaN()
	}
	if u := r.Drover.Unit; u == Ratio || u == Percent || u == MiB {
		return math.NaN() // not "how many times faster"
	}
	return r.BaselineTime.Value / r.Drover.Value
}

// Met says whether the target was met: "yes", "no", "-" (no target) or
// "n/a" (no figure to judge).
func (r Row) Met() string {
	t := r.Target
	switch {
	case t.MinSpeedup > 0:
		ratio := r.Ratio()
		if math.IsNaN(ratio) {
			return "n/a"
		}
		if t.MinSpeedup < 1 {
			return yesNo(ratio > t.MinSpeedup) // strictly under 1/MinSpeedup times the baseline
		}
		return yesNo(ratio >= t.MinSpeedup)
	case t.Max > 0:
		if !r.Drover.OK() {
			return "n/a"
		}
		return yesNo(r.Drover.Value < t.Max)
	}
	return "-"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (r Row) ratioString() string {
	ratio := r.Ratio()
	if math.IsNaN(ratio) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", ratio)
}

func (r Row) baselineString() string {
	if r.Baseline == "" {
		return "-"
	}
	return r.Baseline + ": " + r.BaselineTime.String()
}

func (r Row) runs() string {
	n := r.Drover.N
	if r.Baseline != "" && r.BaselineTime.N > 0 && (n == 0 || r.BaselineTime.N < n) {
		n = r.BaselineTime.N
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

var header = []string{"SECTION", "N", "WHAT", "DROVER", "BASELINE", "RATIO", "RUNS", "TARGET", "MET"}

func (r Row) cells() []string {
	return []string{r.Section, fmt.Sprint(r.N), r.What, r.Drover.String(), r.baselineString(),
		r.ratioString(), r.runs(), r.Target.String(), r.Met()}
}

// WriteText prints the table for a terminal.
func WriteText(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t"))
	}
	return tw.Flush()
}

// WriteMarkdown prints the same table as GitHub markdown.
func WriteMarkdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(header)) + "\n")
	for _, r := range rows {
		cells := r.cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Doc is everything docs/benchmarks.md is made of.
type Doc struct {
	Command  string
	Date     time.Time
	Machine  string
	Revision string
	Elapsed  time.Duration
	// Load is the machine's load average at the start and the end of
	// the run (/proc/loadavg): other work on the machine shows in wall
	// times far more than in CPU times and counted round trips.
	Load [2]string
	Rows []Row
	// Notes are what this run found worth saying (skipped sections,
	// reduced repetitions, events seen); Method explains the set-up.
	Notes  []string
	Method []string
	// Kept is the end of the previous file from keptMarker on: figures
	// measured by fleet tests rather than by this harness (a 64-host
	// fleet behind a bastion), which a run must not drop.
	Kept string
}

// keptMarker starts the part of docs/benchmarks.md that drover-bench
// carries over unchanged.
const keptMarker = "<!-- measured outside make bench; kept by cmd/drover-bench -->"

// keptSection returns doc from keptMarker on, or "".
func keptSection(doc string) string {
	if i := strings.Index(doc, keptMarker); i >= 0 {
		return doc[i:]
	}
	return ""
}

// WriteDoc renders docs/benchmarks.md.
func WriteDoc(w io.Writer, d Doc) error {
	var b strings.Builder
	b.WriteString("# drover benchmarks\n\n")
	b.WriteString("drover against the OpenSSH tools people use instead of it (pdsh, an ssh loop, rsync),\n")
	b.WriteString("side by side in one run on a real fleet of sshd hosts (scripts/testfleet), with what each\n")
	b.WriteString("operation costs in CPU per host, in round trips at a set latency, and at 256 light hosts.\n")
	b.WriteString("Generated by `cmd/drover-bench`; do not edit by hand, run the command again.\n\n")
	fmt.Fprintf(&b, "- Command: `%s` (as root)\n", d.Command)
	fmt.Fprintf(&b, "- Date: %s\n", d.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %s\n", d.Machine)
	if d.Revision != "" {
		fmt.Fprintf(&b, "- drover revision: %s\n", d.Revision)
	}
	fmt.Fprintf(&b, "- Wall time of the whole run: %s\n", d.Elapsed.Round(time.Second))
	if d.Load[0] != "" {
		fmt.Fprintf(&b, "- Load average (1, 5, 15 min) at the start: %s; at the end: %s\n", d.Load[0], d.Load[1])
	}
	b.WriteString("\n")
	b.WriteString("## Results\n\n")
	b.WriteString("RATIO is baseline / drover (above 1: drover is faster), both medians taken in the same run.\n\n")
	if err := WriteMarkdown(&b, d.Rows); err != nil {
		return err
	}
	if len(d.Notes) > 0 {
		b.WriteString("\n## Notes from this run\n\n")
		for _, n := range d.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	if len(d.Method) > 0 {
		b.WriteString("\n## How it is measured\n\n")
		for _, n := range d.Method {
			b.WriteString("- " + n + "\n")
		}
	}
	if d.Kept != "" {
		b.WriteString("\n" + d.Kept)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
