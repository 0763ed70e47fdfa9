package topview

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/top"
)

// Escape makes a string a host sent safe to print (cluster.Escape).
func Escape(s string) string { return cluster.Escape(s) }

// throttleNames are the clock event reasons worth a flag (nvml.h's
// nvmlClocksEventReason bits); idle and application clocks are not.
var throttleNames = []struct {
	bit  uint64
	name string
}{
	{0x4, "power-cap"},
	{0x8, "hw-slowdown"},
	{0x20, "sw-thermal"},
	{0x40, "hw-thermal"},
	{0x80, "power-brake"},
}

// Flags are a GPU's throttle reasons and, while a job runs, what its
// health watch found (a critical finding marked "!"); "-" when there
// are none.
func Flags(g agent.TopGPU) string {
	var f []string
	if g.Throttle != nil {
		for _, t := range throttleNames {
			if *g.Throttle&t.bit != 0 {
				f = append(f, t.name)
			}
		}
	}
	if g.ECCVolatile != nil && *g.ECCVolatile > 0 && len(g.Health) == 0 {
		f = append(f, fmt.Sprintf("ecc-uncorrected=%g", *g.ECCVolatile)) // the health watch says it better
	}
	f = append(f, findings(g.Health)...)
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ",")
}

// findings are health findings as flags: a critical one marked "!".
func findings(fs []agent.TopFinding) []string {
	var out []string
	for _, h := range fs {
		if h.Critical {
			out = append(out, "!"+h.What)
		} else {
			out = append(out, h.What)
		}
	}
	return out
}

// Ranks names the processes using GPU g of host h ("worker-0"), "-" for
// none.
func Ranks(h top.Host, g agent.TopGPU) string {
	var names []string
	for _, p := range h.Procs {
		for _, i := range p.GPUs {
			if i == g.Index {
				names = append(names, p.Name)
			}
		}
	}
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ",")
}

func optNum(v *float64, format string) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf(format, *v)
}

func mem(g agent.TopGPU) string {
	if g.MemUsedMiB == nil || g.MemTotalMiB == nil {
		return "?"
	}
	return fmt.Sprintf("%.1f/%.0fG", *g.MemUsedMiB/1024, *g.MemTotalMiB/1024)
}

// Rows are the view as text lines: a header, a row per GPU (or one
// saying why a host shows none), then a row per process. Every field a
// host sent is escaped.
func Rows(v top.View) []string {
	out := []string{fmt.Sprintf("drover top: %s   %s", Escape(v.Job), v.Time.Format(time.TimeOnly))}
	gpuRow := "%-16s %-4s %5s %11s %5s %7s  %-20s %s"
	out = append(out, fmt.Sprintf(gpuRow, "HOST", "GPU", "UTIL", "MEMORY", "TEMP", "POWER", "FLAGS", "PROCESSES"))
	for _, h := range v.Hosts {
		name := Escape(h.Host)
		switch {
		case !h.Reachable:
			out = append(out, fmt.Sprintf("%-16s unreachable: %s", name, Escape(h.Error)))
		case len(h.GPUs) == 0:
			why := "no GPUs"
			if h.GPUError != "" {
				why += ": " + h.GPUError
			}
			out = append(out, fmt.Sprintf("%-16s %s", name, Escape(why)))
		}
		if !h.Reachable {
			continue
		}
		if len(h.Health) > 0 {
			out = append(out, fmt.Sprintf("%-16s health: %s", name, Escape(strings.Join(findings(h.Health), "; "))))
		}
		for _, g := range h.GPUs {
			out = append(out, fmt.Sprintf(gpuRow, name, strconv.Itoa(g.Index), optNum(g.UtilPct, "%.0f%%"), mem(g),
				optNum(g.TempC, "%.0fC"), optNum(g.PowerW, "%.0fW"), Flags(g), Escape(Ranks(h, g))))
		}
	}
	out = append(out, "")
	procRow := "%-16s %-16s %8s %-10s %8s %10s %8s"
	out = append(out, fmt.Sprintf(procRow, "PROCESS", "HOST", "PID", "STATE", "OUTPUT", "STEP", "STEPS/S"))
	for _, h := range v.Hosts {
		for _, p := range h.Procs {
			age := "-"
			if p.OutputAgeS >= 0 {
				age = (time.Duration(p.OutputAgeS) * time.Second).String() + " ago"
			}
			step, rate := "-", "-"
			if p.Step != nil {
				step = strconv.FormatInt(*p.Step, 10)
			}
			if p.StepRate != nil {
				rate = fmt.Sprintf("%.2f", *p.StepRate)
			}
			out = append(out, fmt.Sprintf(procRow, Escape(p.Name), Escape(h.Host), strconv.Itoa(p.Pid), Escape(p.State), age, step, rate))
		}
	}
	for _, s := range v.Stragglers {
		out = append(out, Escape(s))
	}
	return out
}

// Print writes the view as --once prints it (Rows) to w, then again every
// interval, a blank line between views, until ctx ends: `drover top` whose
// output is not a terminal (a pipe, a file, a log) shows the same as on
// one, a view per refresh, rather than nothing.
func Print(ctx context.Context, w io.Writer, view func() top.View, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for sep := ""; ; sep = "\n" {
		if _, err := io.WriteString(w, sep+strings.Join(Rows(view()), "\n")+"\n"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
