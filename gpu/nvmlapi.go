package gpu

import "strconv"

// NVML is the part of NVIDIA's management library the probe reads, as an
// interface so that the probe's logic is tested without a GPU: package
// gpu/dlnvml implements it over the real library, and the tests adapt
// go-nvml's mocks to it. Methods mirror the C functions of the same names.
type NVML interface {
	Init() Return
	Shutdown() Return
	SystemGetDriverVersion() (string, Return)
	// SystemGetCudaDriverVersion is 1000*major + 10*minor (12040).
	SystemGetCudaDriverVersion() (int, Return)
	DeviceGetCount() (int, Return)
	DeviceGetHandleByIndex(i int) (NVMLDevice, Return)
	// HasSymbol reports whether the loaded library has the C function
	// symbol (newer calls are missing from older drivers).
	HasSymbol(symbol string) bool
	// EventSetCreate is nvmlEventSetCreate: a set to register devices'
	// Xid events with (see LocalProber.XIDWait).
	EventSetCreate() (NVMLEventSet, Return)
}

// NVMLEventSet is an nvmlEventSet_t.
type NVMLEventSet interface {
	// Wait is nvmlEventSetWait_v2: the next event within timeoutMs,
	// ErrorTimeout when none came; xid is nvmlEventData_t.eventData.
	Wait(timeoutMs uint32) (dev NVMLDevice, xid uint64, ret Return)
	Free() Return
}

// NVMLDevice is one GPU's handle.
type NVMLDevice interface {
	GetIndex() (int, Return)
	GetUUID() (string, Return)
	GetName() (string, Return)
	// GetPCIBusID is nvmlPciInfo_t.busId, "00000000:07:00.0".
	GetPCIBusID() (string, Return)
	GetMemoryInfo() (MemoryInfo, Return)
	// GetUtilizationGPU is nvmlUtilization_t.gpu, percent.
	GetUtilizationGPU() (uint32, Return)
	// GetMigMode is the current mode: MIGEnabled or 0.
	GetMigMode() (int, Return)
	GetComputeRunningProcesses() ([]ProcessInfo, Return)

	// Health (see Health): nvmlDeviceGetTotalEccErrors for uncorrected
	// errors, volatile or aggregate counter.
	GetUncorrectedEccErrors(aggregate bool) (uint64, Return)
	GetRetiredPagesPendingStatus() (bool, Return)
	// GetRemappedRows is nvmlDeviceGetRemappedRows's isPending and
	// failureOccurred.
	GetRemappedRows() (pending, failure bool, ret Return)
	// GetClocksEventReasons is nvmlDeviceGetCurrentClocksEventReasons
	// (…ThrottleReasons on drivers before R535).
	GetClocksEventReasons() (uint64, Return)
	// GetPcieLink is the current (max false) or maximum link
	// generation and width.
	GetPcieLink(max bool) (gen, width int, ret Return)
	// RegisterXIDEvents is nvmlDeviceRegisterEvents with
	// nvmlEventTypeXidCriticalError.
	RegisterXIDEvents(set NVMLEventSet) Return
}

// MemoryInfo is nvmlMemory_t's total and used bytes.
type MemoryInfo struct{ Total, Used uint64 }

// ProcessInfo is one compute process on a GPU. UsedGPUMemory is bytes, or
// all ones when NVML cannot tell (NVML_VALUE_NOT_AVAILABLE).
type ProcessInfo struct {
	PID           uint32
	UsedGPUMemory uint64
}

// MIGEnabled is NVML_DEVICE_MIG_ENABLE.
const MIGEnabled = 1

// Return is an NVML status (nvmlReturn_t).
type Return int32

// The statuses the probe tells apart or names (nvml.h).
const (
	Success               Return = 0
	ErrorUninitialized    Return = 1
	ErrorInvalidArgument  Return = 2
	ErrorNotSupported     Return = 3
	ErrorNoPermission     Return = 4
	ErrorNotFound         Return = 6
	ErrorInsufficientSize Return = 7
	ErrorDriverNotLoaded  Return = 9
	ErrorTimeout          Return = 10
	ErrorLibraryNotFound  Return = 12
	ErrorFunctionNotFound Return = 13
	ErrorGPUIsLost        Return = 15
	// ErrorArgumentVersionMismatch: the driver does not know the
	// struct version a _v2 call was given.
	ErrorArgumentVersionMismatch Return = 25
	ErrorUnknown                 Return = 999
)

// NoDriverReason is a report's Reason when libnvidia-ml.so.1 cannot be
// loaded: the host has no NVIDIA driver (or none this process can load).
const NoDriverReason = "nvml: " + NVMLLibrary + " not found: no NVIDIA driver"

var returnNames = map[Return]string{
	Success:                      "success",
	ErrorUninitialized:           "uninitialized",
	ErrorInvalidArgument:         "invalid argument",
	ErrorNotSupported:            "not supported",
	ErrorNoPermission:            "insufficient permissions",
	ErrorNotFound:                "not found",
	ErrorInsufficientSize:        "insufficient size",
	ErrorDriverNotLoaded:         "driver not loaded",
	ErrorTimeout:                 "timeout",
	ErrorLibraryNotFound:         "library not found",
	ErrorFunctionNotFound:        "function not found",
	ErrorGPUIsLost:               "GPU is lost",
	ErrorArgumentVersionMismatch: "argument version mismatch",
	ErrorUnknown:                 "unknown error",
}

// Error names r as NVML's documentation does, without calling into a
// library that may not be loaded.
func (r Return) Error() string {
	if s, ok := returnNames[r]; ok {
		return s
	}
	return "NVML error " + strconv.Itoa(int(r))
}
