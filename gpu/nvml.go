package gpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// NVMLLibrary is the library NVML is loaded from, at run time: a binary
// that reads NVML runs on hosts without it.
const NVMLLibrary = "libnvidia-ml.so.1"

// valueNotAvailable is NVML's NVML_VALUE_NOT_AVAILABLE for unsigned
// long long fields such as a process's used GPU memory.
const valueNotAvailable = ^uint64(0)

const mib = 1 << 20

// LocalProber reads this machine's GPUs over NVML. It is what the agent runs
// on a GPU host; tests give it go-nvml's mocks in place of the library.
type LocalProber struct {
	// NVML is the library (package gpu/dlnvml loads the real one).
	NVML NVML
	// ProcName returns the command name of a process; nil reads
	// /proc/<pid>/comm. It is best effort: "" when unknown.
	ProcName func(pid int) string
	// XIDWait, when positive, makes Probe wait this long for Xid events
	// after reading the GPUs (see listenXIDs); a health poll sets it.
	XIDWait time.Duration
	// Now is the clock of XIDWait; nil is time.Now.
	Now func() time.Time
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
	case ret == ErrorLibraryNotFound:
		rep.Reason = NoDriverReason
		return rep
	case ret == ErrorDriverNotLoaded:
		rep.Reason = "nvml: NVIDIA kernel driver not loaded"
		return rep
	case ret != Success:
		rep.Reason = "nvml: init: " + ret.Error()
		return rep
	}
	defer safe0(lib.Shutdown)

	rep.Source = SourceNVML
	if v, ret := safe1(lib.SystemGetDriverVersion); ret == Success {
		rep.Driver = v
	}
	if v, ret := safe1(lib.SystemGetCudaDriverVersion); ret == Success {
		rep.CUDA = cudaVersion(v)
	}
	n, ret := safe1(lib.DeviceGetCount)
	if ret != Success {
		rep.Source = SourceNone
		rep.Reason = "nvml: count devices: " + ret.Error()
		return rep
	}
	var failed []string
	handles := map[int]NVMLDevice{}
	for i := 0; i < n; i++ {
		h, ret := safe1(func() (NVMLDevice, Return) { return lib.DeviceGetHandleByIndex(i) })
		if ret != Success || h == nil {
			// A GPU that fell off the bus or that the user may not
			// access: report it so nobody pins it, skip it.
			failed = append(failed, fmt.Sprintf("GPU %d: %s", i, ret.Error()))
			if ret == ErrorGPUIsLost {
				rep.LostGPUs = append(rep.LostGPUs, strconv.Itoa(i))
			}
			continue
		}
		d := p.device(lib, i, h)
		hl, lost := health(h)
		if hl != (Health{}) {
			d.Health = &hl // nil: no counter could be read
		}
		if lost {
			rep.LostGPUs = append(rep.LostGPUs, strconv.Itoa(d.Index))
		}
		handles[d.Index] = h
		rep.Devices = append(rep.Devices, d)
	}
	if p.XIDWait > 0 && len(handles) > 0 {
		p.listenXIDs(lib, handles, &rep)
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
func (p LocalProber) device(lib NVML, i int, h NVMLDevice) Device {
	d := Device{Index: i, Processes: []Process{}}
	if idx, ret := safe1(h.GetIndex); ret == Success {
		d.Index = idx
	}
	if v, ret := safe1(h.GetUUID); ret == Success {
		d.UUID = v
	} else {
		d.markUnknown(FieldUUID)
	}
	if v, ret := safe1(h.GetName); ret == Success {
		d.Name = v
	} else {
		d.markUnknown(FieldName)
	}
	if v, ret := safe1(h.GetPCIBusID); ret == Success && v != "" {
		d.PCIBusID = v
	} else {
		d.markUnknown(FieldPCIBusID)
	}
	if v, ret := safe1(h.GetMemoryInfo); ret == Success {
		d.MemoryTotalMiB = int64(v.Total / mib)
		d.MemoryUsedMiB = int64(v.Used / mib)
	} else {
		d.markUnknown(FieldMemory)
	}
	if v, ret := safe1(h.GetUtilizationGPU); ret == Success {
		d.UtilizationPct = int(v)
	} else {
		d.markUnknown(FieldUtilization)
	}
	d.MIG, d.Unknown = p.migMode(lib, h, d.Unknown)
	if procs, ret := safe1(h.GetComputeRunningProcesses); ret == Success {
		for _, pi := range procs {
			pr := Process{PID: int(pi.PID), Name: p.procName(int(pi.PID)), UsedMiB: -1}
			if pi.UsedGPUMemory != valueNotAvailable {
				pr.UsedMiB = int64(pi.UsedGPUMemory / mib)
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
func (p LocalProber) migMode(lib NVML, h NVMLDevice, unknown []Field) (bool, []Field) {
	// Drivers older than R450 lack the symbol; ask first rather than
	// call what is not there.
	if !safeHas(lib, "nvmlDeviceGetMigMode") {
		return false, unknown
	}
	cur, ret := safe1(h.GetMigMode)
	switch ret {
	case Success:
		return cur == MIGEnabled, unknown
	case ErrorNotSupported:
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

// safe0, safe1 and safeHas call an NVML query and turn a panic into
// ErrorUnknown. go-nvml's mocks panic on queries a test did not set up,
// and a probe must report what it could read rather than crash.
func safe0(f func() Return) (ret Return) {
	defer func() {
		if recover() != nil {
			ret = ErrorUnknown
		}
	}()
	return f()
}

func safe1[T any](f func() (T, Return)) (v T, ret Return) {
	defer func() {
		if recover() != nil {
			ret = ErrorUnknown
		}
	}()
	return f()
}

// safeHas answers true when the question panics: the query itself is
// then asked, and guarded, as for any library that cannot say.
func safeHas(lib NVML, symbol string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	return lib.HasSymbol(symbol)
}
