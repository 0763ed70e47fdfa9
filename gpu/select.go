package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
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

// Select picks the GPUs of host that job will use, from the probe rep.
//
//   - gpus = "auto" takes every free GPU: no compute process and at most
//     job.GPUMaxUsedMiB of memory in use; MIG-enabled GPUs and GPUs whose
//     state cannot be read are skipped.
//   - gpus = [0, 2] takes exactly those, failing if one does not exist; a
//     pinned GPU that is busy is still used (the user asked for it) but
//     warned about.
//   - gpus = [] selects nothing.
//
// min_gpus (the host's, else the job's) turns a shortfall into an error
// that names each busy GPU and the process holding it, because "not enough
// GPUs" alone sends the user to nvidia-smi on every host.
func Select(host config.Host, job config.Job, rep HostReport) (Selection, error) {
	sel := Selection{Host: host.Name, Indices: []int{}, Devices: []Device{}}
	switch {
	case host.GPUs.Auto:
		for _, d := range rep.Devices {
			if why := notFree(d, job.GPUMaxUsedMiB); why != "" {
				sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: why})
				continue
			}
			sel.add(d)
		}
		if len(rep.Devices) == 0 && rep.Reason != "" {
			sel.Warnings = append(sel.Warnings, fmt.Sprintf(`gpus = "auto" found no GPUs (%s)`, rep.Reason))
		}
	case len(host.GPUs.List) > 0:
		seen := map[int]bool{}
		for _, i := range host.GPUs.List {
			if seen[i] {
				return sel, fmt.Errorf("gpus = %s lists GPU %d twice", host.GPUs, i)
			}
			seen[i] = true
			d, ok := rep.Device(i)
			if !ok {
				return sel, fmt.Errorf("gpus = %s: GPU %d does not exist (%s)", host.GPUs, i, existing(rep))
			}
			if why := notFree(d, job.GPUMaxUsedMiB); why != "" {
				sel.Warnings = append(sel.Warnings, fmt.Sprintf("pinned GPU %d is used anyway: %s", i, why))
			}
			sel.add(d)
		}
		for _, d := range rep.Devices {
			if !seen[d.Index] {
				sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: "not in gpus = " + host.GPUs.String()})
			}
		}
	default:
		for _, d := range rep.Devices {
			sel.Skipped = append(sel.Skipped, Skip{Index: d.Index, Why: "gpus = []"})
		}
	}
	sortSelection(&sel)

	minGPUs := host.MinGPUs
	if minGPUs == 0 {
		minGPUs = job.MinGPUs
	}
	if (host.GPUs.Auto || len(host.GPUs.List) > 0) && len(sel.Indices) < minGPUs {
		return sel, shortfall(rep, sel, minGPUs)
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
