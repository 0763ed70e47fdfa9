// Package gpu knows GPUs, not hosts: it reads this machine's GPUs over
// NVML (LocalProber), parses nvidia-smi's output into the same HostReport,
// selects the GPUs a job may use according to a host's gpus setting, and
// renders the result for `drover probe`. It has no transport knowledge:
// the agent (package launcher/agent) runs LocalProber on each host, and
// launcher/agent/remote runs the agent or nvidia-smi there and hands the
// output to this package.
//
// # How NVML is loaded
//
// LocalProber reads NVML through the small NVML interface, not a binding:
// package gpu/dlnvml implements it by loading libnvidia-ml.so.1 at run time
// with github.com/ebitengine/purego, which needs no cgo, so drover builds
// with CGO_ENABLED=0 for every platform (go-nvml, used before, needs cgo
// and made the binary need the build machine's glibc). purego was chosen
// over keeping go-nvml behind a build tag because the portable build is
// the one that goes to hosts: it must read NVML itself, not fall back to
// nvidia-smi. go-nvml's mocks still test the probe and the selection
// rules: the tests adapt them to NVML (those tests need cgo). Loading a
// library needs a dynamic loader, which a static agent does not have: see
// package launcher/agent for how the static agents still read NVML.
//
// A host without an NVIDIA driver is not an error: its report has zero
// devices, Source "none" and a Reason saying why, so that CPU hosts and
// misconfigured GPU hosts are told apart in `drover probe` rather than
// failing the whole command.
//
// # Missing fields
//
// NVML answers ERROR_NOT_SUPPORTED for utilisation, running processes and
// MIG mode on some boards and drivers, and nvidia-smi prints "[N/A]" or
// "[Not Supported]". Such a field is left at its zero value and named in
// Device.Unknown; selection and rendering consult Known rather than trusting
// a zero. A GPU whose memory use and processes are both unknown cannot be
// shown to be free, so "auto" skips it.
//
// # Health
//
// Each Device may carry its Health: uncorrectable ECC counts, retired
// pages and row remapping, clock event (throttle) reasons and the PCIe
// link, read over NVML (LocalProber) or parsed from nvidia-smi's
// --query-gpu health fields (ParseSMIHealth, in the forms a real H200
// prints: "[N/A]", "No", "0x0000000000000000"). Xid events come from an
// NVML event set (LocalProber.XIDWait) or the kernel log
// (ParseKernelXIDs). CheckHealth turns a report into Findings, critical or
// warnings, under a small HealthPolicy (the Xids to ignore); what a
// finding does to a run is the launcher's business, not this package's.
//
// # MIG
//
// drover schedules whole GPUs. A GPU with MIG enabled cannot be used whole
// by CUDA (CUDA sees its MIG instances instead), so gpus = "auto" skips it
// with the reason "MIG enabled: pin MIG UUIDs explicitly"; users who want MIG
// instances set CUDA_VISIBLE_DEVICES to MIG UUIDs in the job's env. Pinning
// a MIG-enabled GPU by index is allowed but warned about.
//
// # CUDA_VISIBLE_DEVICES
//
// GPU numbers in job files (gpus = [0, 2]) and in drover's output are
// NVML indices, which are the indices nvidia-smi prints; NVML enumerates
// GPUs in PCI bus order. CUDA's default order is FASTEST_FIRST, which
// differs from PCI order on hosts with mixed GPU models, so the same index
// could name another GPU. The plan (package launcher/plan) therefore sets
// CUDA_DEVICE_ORDER=PCI_BUS_ID together with CUDA_VISIBLE_DEVICES=indices,
// which makes CUDA's numbering equal NVML's. Indices were chosen over
// UUIDs because they match what users wrote and what nvidia-smi shows, and
// because training scripts and tools commonly parse CUDA_VISIBLE_DEVICES as
// integers; UUIDs would only add protection against the enumeration
// changing between the probe and the launch (a GPU falling off the bus),
// which the probe at every (re)start already covers.
package gpu
