package gpu

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// HostResult is one host as `drover probe` shows it: what the probe found
// and what Select made of it.
type HostResult struct {
	Report HostReport
	// Selection is Select's result; the zero Selection (Host "") means
	// no selection was made (`drover agent probe`), and the table then
	// shows "-" for every GPU.
	Selection Selection
	// Err is Select's error (a missing pinned GPU, a min_gpus shortfall).
	Err error
	// Findings are the health findings (`drover probe --health`); nil
	// when health was not read.
	Findings []Finding
}

// RenderTable writes one row per GPU (host, index, name, memory, util,
// busy-by, selected or why not), then one line per host with its source,
// driver and selection, and any warnings and errors. A host with no GPUs
// has no rows; its line says why ("h1: 0 GPUs (nvml: libnvidia-ml.so.1 not
// found: no NVIDIA driver)"), which is often the point of running probe.
func RenderTable(w io.Writer, results []HostResult) error {
	rows, leased := 0, false
	for _, r := range results {
		rows += len(r.Report.Devices)
		for _, d := range r.Report.Devices {
			leased = leased || d.LeasedBy != ""
		}
	}
	if rows > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head := "HOST\tGPU\tNAME\tMEMORY MiB\tUTIL\tBUSY BY\tSELECTED"
		if leased { // the column only when a GPU is leased: a fleet of one user reads as before
			head += "\tLEASED BY"
		}
		fmt.Fprintln(tw, head)
		for _, r := range results {
			for _, d := range r.Report.Devices {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s", r.Report.Host, d.Index, cellName(d),
					cellMemory(d), cellUtil(d), cellBusy(d), cellSelected(r.Selection, d.Index))
				if leased {
					fmt.Fprintf(tw, "\t%s", cmp.Or(d.LeasedBy, "-"))
				}
				fmt.Fprintln(tw)
			}
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("render GPU table: %w", err)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return fmt.Errorf("render GPU table: %w", err)
		}
	}
	var b strings.Builder
	for _, r := range results {
		b.WriteString(r.Report.Summary())
		if r.Selection.Host != "" && (len(r.Report.Devices) > 0 || len(r.Selection.Indices) > 0) {
			b.WriteString(": selected ")
			b.WriteString(indexList(r.Selection.Indices))
		}
		b.WriteByte('\n')
		for _, wn := range r.Selection.Warnings {
			b.WriteString("  warning: " + wn + "\n")
		}
		if r.Err != nil {
			b.WriteString("  error: " + r.Err.Error() + "\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("render GPU table: %w", err)
	}
	return nil
}

// jsonHost is RenderJSON's per-host object: the report's fields plus the
// selection, flat, so scripts read .selected without digging.
type jsonHost struct {
	HostReport
	Selected []int    `json:"selected"`
	Skipped  []Skip   `json:"skipped"`
	Warnings []string `json:"warnings"`
	Error    string   `json:"error,omitempty"`
	// Findings: with --health only.
	Findings []Finding `json:"findings,omitempty"`
}

// RenderJSON writes the results as a JSON array for scripts (`drover probe
// --json`); empty lists are [] rather than null so that jq filters need no
// null checks.
func RenderJSON(w io.Writer, results []HostResult) error {
	out := make([]jsonHost, len(results))
	for i, r := range results {
		h := jsonHost{HostReport: r.Report, Selected: r.Selection.Indices,
			Skipped: r.Selection.Skipped, Warnings: r.Selection.Warnings, Findings: r.Findings}
		if h.Devices == nil {
			h.Devices = []Device{}
		}
		for j := range h.Devices {
			if h.Devices[j].Processes == nil {
				h.Devices[j].Processes = []Process{}
			}
		}
		if h.Selected == nil {
			h.Selected = []int{}
		}
		if h.Skipped == nil {
			h.Skipped = []Skip{}
		}
		if h.Warnings == nil {
			h.Warnings = []string{}
		}
		if r.Err != nil {
			h.Error = r.Err.Error()
		}
		out[i] = h
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("render GPU report as JSON: %w", err)
	}
	return nil
}

const na = "n/a"

func cellName(d Device) string {
	if !d.Known(FieldName) {
		return na
	}
	return d.Name
}

func cellMemory(d Device) string {
	if !d.Known(FieldMemory) {
		return na
	}
	return fmt.Sprintf("%d/%d", d.MemoryUsedMiB, d.MemoryTotalMiB)
}

func cellUtil(d Device) string {
	if !d.Known(FieldUtilization) {
		return na
	}
	return strconv.Itoa(d.UtilizationPct) + "%"
}

func cellBusy(d Device) string {
	if !d.Known(FieldProcesses) {
		return na
	}
	if len(d.Processes) == 0 {
		return "-"
	}
	ps := make([]string, len(d.Processes))
	for i, p := range d.Processes {
		ps[i] = p.String()
	}
	return strings.Join(ps, ", ")
}

func cellSelected(sel Selection, index int) string {
	if sel.Host == "" {
		return "-"
	}
	for _, i := range sel.Indices {
		if i == index {
			return "yes"
		}
	}
	for _, s := range sel.Skipped {
		if s.Index == index {
			if strings.HasPrefix(s.Why, "busy: pid ") {
				return "no: busy" // BUSY BY names the processes
			}
			return "no: " + s.Why
		}
	}
	return "no"
}

func indexList(idx []int) string {
	if len(idx) == 0 {
		return "none"
	}
	s := make([]string, len(idx))
	for i, n := range idx {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
