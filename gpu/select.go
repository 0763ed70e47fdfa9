package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MIGSkipReason is why gpus = "auto" leaves out a MIG-enabled GPU: drover
// schedules whole GPUs, and CUDA cannot use a MIG-enabled GPU whole.
const MIGSkipReason = "MIG enabled: pin MIG UUIDs explicitly"

// Skip is a GPU of the host that the selection does not use, and why; the
// why is shown to users, so it names the process or setting responsible.
type Skip struct {
	Index int    `json:"index"`
	Why   string `json:"why"`
}

// Selection is the GPUs of one host that a job will use.
type Selection struct {
	Host string `json:"host"`
	// Indices are NVML indices in ascending order; they are what
	// CUDA_VISIBLE_DEVICES gets (package plan sets it).
	Indices []int `json:"indices"`
	// Devices are the selected devices, in the order of Indices.
	Devices []Device `json:"devices"`
	// Skipped are the host's other GPUs.
	Skipped []Skip `json:"skipped,omitempty"`
	// Warnings are things the user should know but that do not stop the
	// job, e.g. a pinned GPU that another process is using.
	Warnings []string `json:"warnings,omitempty"`
}

// Spec says which GPUs of a host to use: the job file's gpus key, which
// the caller converts (package gpu does not read the job file).
type Spec struct {
	// Auto means use the free GPUs the probe finds.
	Auto bool
	// List pins GPU indices (NVML/PCI bus order); empty with Auto false
	// means the host has no GPUs to use.
	List []int
}

// String renders the spec as written in TOML: "auto", [] or [0, 1], so
// that errors quote the user's own key.
func (s Spec) String() string {
	if s.Auto {
		return "auto"
	}
	parts := make([]string, len(s.List))
	for i, n := range s.List {
		parts[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Policy is what Select needs to know of the job for one host, as plain
// values: the launcher builds it from the job file (its gpuPolicy), so
// the selection rules can be used and tested without one.
type Policy struct {
	// GPUs is the host's gpus key.
	GPUs Spec
	// MinGPUs is the fewest GPUs the host must give (the host's
	// min_gpus, else the job's); 0: any number, none included.
	MinGPUs int
	// MaxUsedMiB is gpu_max_used_mib: the most memory a GPU may have in
	// use and still count as free.
	MaxUsedMiB int
}

// Select picks the GPUs of host that the job will use, from the probe rep.
//
//   - gpus = "auto" takes every free GPU: no compute process and at most
//     p.MaxUsedMiB of memory in use; MIG-enabled GPUs and GPUs whose
//     state cannot be read are skipped.
//   - gpus = [0, 2] takes exactly those, failing if one does not exist; a
//     pinned GPU that is busy is still used (the user asked for it) but
//     warned about.
//   - gpus = [] selects nothing.
//
// p.MinGPUs (min_gpus) turns a shortfall into an error
// that names each busy GPU and the process holding it, because "not enough
// GPUs" alone sends the user to nvidia-smi on every host.
func Select(host string, p Policy, rep HostReport) (Selection, error) {
	sel := Selection{Host: host, Indices: []int{}, Devices: []Device{}}
	switch {
	case p.GPUs.Auto:
		for _, d := range rep.Devices {
			if why := notFree(d, p.MaxUsedMiB); why != "" {
				sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: why})
				continue
			}
			sel.add(d)
		}
		if len(rep.Devices) == 0 && rep.Reason != "" {
			sel.Warnings = append(sel.Warnings, fmt.Sprintf(`gpus = "auto" found no GPUs (%s)`, rep.Reason))
		}
	case len(p.GPUs.List) > 0:
		seen := map[int]bool{}
		for _, i := range p.GPUs.List {
			if seen[i] {
				return sel, fmt.Errorf("gpus = %s lists GPU %d twice", p.GPUs, i)
			}
			seen[i] = true
			d, ok := rep.Device(i)
			if !ok {
				return sel, fmt.Errorf("gpus = %s: GPU %d does not exist (%s)", p.GPUs, i, existing(rep))
			}
			if why := notFree(d, p.MaxUsedMiB); why != "" {
				sel.Warnings = append(sel.Warnings, fmt.Sprintf("pinned GPU %d is used anyway: %s", i, why))
			}
			sel.add(d)
		}
		for _, d := range rep.Devices {
			if !seen[d.Index] {
				sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: "not in gpus = " + p.GPUs.String()})
			}
		}
	default:
		for _, d := range rep.Devices {
			sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: "gpus = []"})
		}
	}
	sortSelection(&sel)

	if (p.GPUs.Auto || len(p.GPUs.List) > 0) && len(sel.Indices) < p.MinGPUs {
		return sel, shortfall(rep, sel, p.MinGPUs)
	}
	return sel, nil
}

// add appends d to the selection.
func (s *Selection) add(d Device) {
	s.Indices = append(s.Indices, d.Index)
	s.Devices = append(s.Devices, d)
}

// sortSelection orders devices and skips by index, whatever order the probe
// reported them in.
func sortSelection(s *Selection) {
	slices.SortFunc(s.Devices, func(a, b Device) int { return a.Index - b.Index })
	for i, d := range s.Devices {
		s.Indices[i] = d.Index
	}
	slices.SortFunc(s.Skipped, func(a, b Skip) int { return a.Index - b.Index })
}

// notFree says why d is not free for a job, or "" when it is.
func notFree(d Device, maxUsedMiB int) string {
	if d.MIG {
		return MIGSkipReason
	}
	if d.Known(FieldProcesses) && len(d.Processes) > 0 {
		ps := make([]string, len(d.Processes))
		for i, p := range d.Processes {
			ps[i] = "pid " + p.String()
		}
		return "busy: " + strings.Join(ps, ", ")
	}
	if d.Known(FieldMemory) && d.MemoryUsedMiB > int64(maxUsedMiB) {
		return fmt.Sprintf("busy: %d MiB used > gpu_max_used_mib %d", d.MemoryUsedMiB, maxUsedMiB)
	}
	if !d.Known(FieldMemory) && !d.Known(FieldProcesses) {
		return "unknown state: neither memory use nor processes reported"
	}
	return ""
}

// existing describes the GPUs a host has, for an error about a pinned
// index that is not among them.
func existing(rep HostReport) string {
	if len(rep.Devices) == 0 {
		return rep.Summary()
	}
	idx := make([]string, len(rep.Devices))
	for i, d := range rep.Devices {
		idx[i] = strconv.Itoa(d.Index)
	}
	return fmt.Sprintf("%s has GPUs %s", rep.Host, strings.Join(idx, ", "))
}

// shortfall is the error for fewer selected GPUs than min_gpus.
func shortfall(rep HostReport, sel Selection, minGPUs int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d GPUs usable, min_gpus is %d", len(sel.Indices), len(rep.Devices), minGPUs)
	if len(rep.Devices) == 0 {
		fmt.Fprintf(&b, " (%s)", rep.Summary())
	}
	for _, s := range sel.Skipped {
		fmt.Fprintf(&b, "; GPU %d %s", s.Index, s.Why)
	}
	return errors.New(b.String())
}
