package gpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLibrary is the library NVML is loaded from; go-nvml dlopens it at
// Init, so a binary built with NVML runs on hosts without it.
const nvmlLibrary = "libnvidia-ml.so.1"

// valueNotAvailable is NVML's NVML_VALUE_NOT_AVAILABLE for unsigned
// long long fields such as a process's used GPU memory.
const valueNotAvailable = ^uint64(0)

const mib = 1 << 20

// LocalProber reads this machine's GPUs over NVML. It is what the agent runs
// on a GPU host; tests give it go-nvml's mock in place of the library.
type LocalProber struct {
	// NVML is the library; nvml.New() for the real one.
	NVML nvml.Interface
	// ProcName returns the command name of a process; nil reads
	// /proc/<pid>/comm. It is best effort: "" when unknown.
	ProcName func(pid int) string
}

// ProbeLocal reads this machine's GPUs with the real NVML library. It never
// fails: without a driver it returns zero devices and the reason.
func ProbeLocal(host string) HostReport {
	return LocalProber{NVML: nvml.New()}.Probe(host)
}

// Probe reads every GPU NVML sees. Errors become a Reason (for the whole
// host) or Unknown fields (for one device), never a panic: NVML answers
// ERROR_NOT_SUPPORTED for many queries on some boards, and a probe that
// crashed would hide the GPUs it could read.
func (p LocalProber) Probe(host string) (rep HostReport) {
	rep = HostReport{Host: host, Source: SourceNone, Devices: []Device{}}
	lib := p.NVML
	if lib == nil {
		rep.Reason = "nvml: no library"
		return rep
	}
	ret := safe0(lib.Init)
	switch {
	case ret == nvml.ERROR_LIBRARY_NOT_FOUND:
		rep.Reason = "nvml: " + nvmlLibrary + " not found: no NVIDIA driver"
		return rep
	case ret == nvml.ERROR_DRIVER_NOT_LOADED:
		rep.Reason = "nvml: NVIDIA kernel driver not loaded"
		return rep
	case ret != nvml.SUCCESS:
		rep.Reason = "nvml: init: " + nvmlError(ret)
		return rep
	}
	defer safe0(lib.Shutdown)

	rep.Source = SourceNVML
	if v, ret := safe1(lib.SystemGetDriverVersion); ret == nvml.SUCCESS {
		rep.Driver = v
	}
	if v, ret := safe1(lib.SystemGetCudaDriverVersion); ret == nvml.SUCCESS {
		rep.CUDA = cudaVersion(v)
	}
	n, ret := safe1(lib.DeviceGetCount)
	if ret != nvml.SUCCESS {
		rep.Source = SourceNone
		rep.Reason = "nvml: count devices: " + nvmlError(ret)
		return rep
	}
	var failed []string
	for i := 0; i < n; i++ {
		h, ret := safe1(func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByIndex(i) })
		if ret != nvml.SUCCESS || h == nil {
			// A GPU that fell off the bus or that the user may not
			// access: report it so nobody pins it, skip it.
			failed = append(failed, fmt.Sprintf("GPU %d: %s", i, nvmlError(ret)))
			continue
		}
		rep.Devices = append(rep.Devices, p.device(lib, i, h))
	}
	if len(failed) > 0 {
		rep.Reason = "nvml: " + strings.Join(failed, "; ")
	}
	if n == 0 {
		rep.Reason = "nvml: driver loaded but NVML reports 0 GPUs"
	}
	return rep
}

// device reads one GPU; every query that fails marks its field unknown.
func (p LocalProber) device(lib nvml.Interface, i int, h nvml.Device) Device {
	d := Device{Index: i, Processes: []Process{}}
	if idx, ret := safe1(h.GetIndex); ret == nvml.SUCCESS {
		d.Index = idx
	}
	if v, ret := safe1(h.GetUUID); ret == nvml.SUCCESS {
		d.UUID = v
	} else {
		d.markUnknown(FieldUUID)
	}
	if v, ret := safe1(h.GetName); ret == nvml.SUCCESS {
		d.Name = v
	} else {
		d.markUnknown(FieldName)
	}
	if v, ret := safe1(h.GetPciInfo); ret == nvml.SUCCESS && busID(v) != "" {
		d.PCIBusID = busID(v)
	} else {
		d.markUnknown(FieldPCIBusID)
	}
	if v, ret := safe1(h.GetMemoryInfo); ret == nvml.SUCCESS {
		d.MemoryTotalMiB = int64(v.Total / mib)
		d.MemoryUsedMiB = int64(v.Used / mib)
	} else {
		d.markUnknown(FieldMemory)
	}
	if v, ret := safe1(h.GetUtilizationRates); ret == nvml.SUCCESS {
		d.UtilizationPct = int(v.Gpu)
	} else {
		d.markUnknown(FieldUtilization)
	}
	d.MIG, d.Unknown = p.migMode(lib, h, d.Unknown)
	if procs, ret := safe1(h.GetComputeRunningProcesses); ret == nvml.SUCCESS {
		for _, pi := range procs {
			pr := Process{PID: int(pi.Pid), Name: p.procName(int(pi.Pid)), UsedMiB: -1}
			if pi.UsedGpuMemory != valueNotAvailable {
				pr.UsedMiB = int64(pi.UsedGpuMemory / mib)
			}
			d.Processes = append(d.Processes, pr)
		}
	} else {
		d.markUnknown(FieldProcesses)
	}
	return d
}

// migMode reads the current MIG mode. A GPU that does not support MIG is
// simply not in MIG mode; other failures leave the mode unknown.
func (p LocalProber) migMode(lib nvml.Interface, h nvml.Device, unknown []Field) (bool, []Field) {
	// Drivers older than R450 lack the symbol; with lazy binding a call
	// would abort the process, so ask first.
	if ext := safeExt(lib); ext != nil {
		if err := safeLookup(ext, "nvmlDeviceGetMigMode"); err != nil {
			return false, unknown
		}
	}
	cur, _, ret := safe2(h.GetMigMode)
	switch ret {
	case nvml.SUCCESS:
		return cur == nvml.DEVICE_MIG_ENABLE, unknown
	case nvml.ERROR_NOT_SUPPORTED:
		return false, unknown
	default:
		return false, append(unknown, FieldMIG)
	}
}

func (p LocalProber) procName(pid int) string {
	if p.ProcName != nil {
		return p.ProcName(pid)
	}
	return procComm(pid)
}

// procComm reads a process's command name from /proc; the process may be
// gone or in another PID namespace, so failures give "".
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// busID turns NVML's NUL-terminated C string into a Go string.
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// nvmlError renders a Return without calling into a library that may not be
// loaded, and without panicking on go-nvml's mock.
func nvmlError(ret nvml.Return) (s string) {
	defer func() {
		if recover() != nil {
			s = "NVML error " + strconv.Itoa(int(ret))
		}
	}()
	return ret.Error()
}

// errPanicked stands for a query that panicked instead of answering.
var errPanicked = errors.New("nvml call panicked")

// safe0, safe1 and safe2 call an NVML query and turn a panic into
// ERROR_UNKNOWN. go-nvml's mocks panic on queries a test did not set up,
// and a probe must report what it could read rather than crash.
func safe0(f func() nvml.Return) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_UNKNOWN
		}
	}()
	return f()
}

func safe1[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_UNKNOWN
		}
	}()
	return f()
}

func safe2[T, U any](f func() (T, U, nvml.Return)) (v T, u U, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_UNKNOWN
		}
	}()
	return f()
}

func safeExt(lib nvml.Interface) (ext nvml.ExtendedInterface) {
	defer func() {
		if recover() != nil {
			ext = nil
		}
	}()
	return lib.Extensions()
}

func safeLookup(ext nvml.ExtendedInterface, symbol string) (err error) {
	defer func() {
		if recover() != nil {
			err = errPanicked
		}
	}()
	return ext.LookupSymbol(symbol)
}
