package gpu

import (
	"fmt"
	"slices"
	"strings"
)

// Sources of a HostReport, saying how the devices were read.
const (
	// SourceNVML: drover's agent read NVML on the host.
	SourceNVML = "nvml"
	// SourceSMI: the agent could not run and nvidia-smi's CSV was parsed.
	SourceSMI = "nvidia-smi"
	// SourceNone: no GPUs could be read; Reason says why.
	SourceNone = "none"
)

// Field names a Device field that a source may fail to report; they are
// the values of Device.Unknown.
type Field string

// Fields that NVML or nvidia-smi may not report on some boards and drivers.
const (
	FieldMemory      Field = "memory"
	FieldUtilization Field = "utilization"
	FieldProcesses   Field = "processes"
	FieldMIG         Field = "mig"
	FieldPCIBusID    Field = "pci_bus_id"
	FieldUUID        Field = "uuid"
	FieldName        Field = "name"
)

// Process is a compute process holding a GPU; it is what makes a GPU busy
// and what an error about a busy GPU names.
type Process struct {
	PID int `json:"pid"`
	// Name is the process's command name (/proc/<pid>/comm, or
	// nvidia-smi's process_name); "" when it could not be read. NVML
	// reports host PIDs, so an agent running inside a container with its
	// own PID namespace reads the name of whatever has that PID there (or
	// nothing); drover's agent normally runs on the host itself.
	Name string `json:"name"`
	// UsedMiB is the GPU memory the process holds; -1 when not reported
	// (NVML cannot tell on some configurations, e.g. under MIG).
	UsedMiB int64 `json:"used_mib"`
}

// String renders the process as "4242 python (30000 MiB)" for tables and
// errors.
func (p Process) String() string {
	name := p.Name
	if name == "" {
		name = "?"
	}
	if p.UsedMiB < 0 {
		return fmt.Sprintf("%d %s", p.PID, name)
	}
	return fmt.Sprintf("%d %s (%d MiB)", p.PID, name, p.UsedMiB)
}

// Device is one GPU as probed. Fields listed in Unknown were not reported
// and hold zero values that must not be read as measurements.
type Device struct {
	// Index is the NVML index (PCI bus order), the number nvidia-smi shows
	// and job files use.
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	Name     string `json:"name"`
	PCIBusID string `json:"pci_bus_id,omitempty"`

	MemoryTotalMiB int64 `json:"memory_total_mib"`
	MemoryUsedMiB  int64 `json:"memory_used_mib"`
	// UtilizationPct is the GPU (SM) utilisation over NVML's last sample
	// period, 0..100.
	UtilizationPct int `json:"utilization_pct"`
	// Processes are the compute processes on the GPU.
	Processes []Process `json:"processes"`
	// LeasedBy names the drover run that leases the GPU on its host
	// (drover probe reads the host's leases); "" when none does.
	LeasedBy string `json:"leased_by,omitempty"`
	// MIG is true when MIG mode is currently enabled.
	MIG bool `json:"mig"`

	// Unknown lists the fields the source did not report.
	Unknown []Field `json:"unknown,omitempty"`

	// Health is what the GPU says about its soundness (ECC, remapped
	// rows, throttling, PCIe link); nil when it was not read.
	Health *Health `json:"health,omitempty"`
}

// Known reports whether field f was reported by the probe.
func (d Device) Known(f Field) bool {
	return !slices.Contains(d.Unknown, f)
}

// markUnknown records that f was not reported, once.
func (d *Device) markUnknown(f Field) {
	if !slices.Contains(d.Unknown, f) {
		d.Unknown = append(d.Unknown, f)
	}
}

// HostReport is everything a probe learned about one host's GPUs. It is
// what `drover agent probe --json` prints, so its JSON form is a contract
// between drover versions on either side of an SSH connection: fields may
// be added, never renamed.
type HostReport struct {
	Host    string   `json:"host"`
	Devices []Device `json:"devices"`
	// Source is SourceNVML, SourceSMI or SourceNone.
	Source string `json:"source"`
	// Reason explains zero devices or a fallback, e.g. "nvml:
	// libnvidia-ml.so.1 not found: no NVIDIA driver"; "" when all went well.
	Reason string `json:"reason,omitempty"`
	// Driver is the NVIDIA driver version, e.g. "550.54.15".
	Driver string `json:"driver,omitempty"`
	// CUDA is the highest CUDA version the driver supports, e.g. "12.4".
	CUDA string `json:"cuda,omitempty"`

	// LostGPUs are the GPUs the driver reports lost ("GPU is lost"), by
	// index or PCI bus id: they have no Device.
	LostGPUs []string `json:"lost_gpus,omitempty"`
	// XIDs are the driver's Xid events read by a health check (see
	// package launcher/agent's health command), XIDSource where from
	// ("nvml", "kernel log", both joined by " and "), XIDReason why they
	// could not be read ("" when they were).
	XIDs      []XID  `json:"xids,omitempty"`
	XIDSource string `json:"xid_source,omitempty"`
	XIDReason string `json:"xid_reason,omitempty"`
}

// Device returns the device with NVML index i.
func (r HostReport) Device(i int) (Device, bool) {
	for _, d := range r.Devices {
		if d.Index == i {
			return d, true
		}
	}
	return Device{}, false
}

// Summary is the one-line account of a host used in tables and errors:
// "h1: 8 GPUs (nvml, driver 550.54.15, CUDA 12.4)" or
// "h1: 0 GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)".
func (r HostReport) Summary() string {
	var parts []string
	if r.Source != "" && r.Source != SourceNone {
		parts = append(parts, r.Source)
	}
	if r.Driver != "" {
		parts = append(parts, "driver "+r.Driver)
	}
	if r.CUDA != "" {
		parts = append(parts, "CUDA "+r.CUDA)
	}
	detail := strings.Join(parts, ", ")
	if r.Reason != "" {
		if detail != "" {
			detail += "; "
		}
		detail += r.Reason
	}
	noun := "GPUs"
	if len(r.Devices) == 1 {
		noun = "GPU"
	}
	s := fmt.Sprintf("%s: %d %s", r.Host, len(r.Devices), noun)
	if detail != "" {
		s += " (" + detail + ")"
	}
	return s
}

// cudaVersion renders NVML's CUDA driver version integer (12040) as "12.4".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	major, minor := v/1000, (v%1000)/10
	return fmt.Sprintf("%d.%d", major, minor)
}
