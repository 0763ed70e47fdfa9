package dlnvml

import (
	"unsafe"

	"github.com/droverhq/drover/gpu"
)

// The health calls (see gpu.Health). Their arguments are scalars and
// pointers to scalars, the same in every NVML version since R450, except
// for the event data struct below.

// nvml.h's NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC and
// NVML_AGGREGATE_ECC.
const (
	memoryErrorUncorrected = 1
	volatileECC            = 0
	aggregateECC           = 1
)

func (d device) GetUncorrectedEccErrors(aggregate bool) (uint64, gpu.Return) {
	counter := uintptr(volatileECC)
	if aggregate {
		counter = aggregateECC
	}
	var v uint64
	ret := d.l.call([]string{"nvmlDeviceGetTotalEccErrors"}, d.h, memoryErrorUncorrected, counter, uintptr(unsafe.Pointer(&v)))
	return v, ret
}

func (d device) GetRetiredPagesPendingStatus() (bool, gpu.Return) {
	var v uint32 // nvmlEnableState_t
	ret := d.l.call([]string{"nvmlDeviceGetRetiredPagesPendingStatus"}, d.h, uintptr(unsafe.Pointer(&v)))
	return v != 0, ret
}

func (d device) GetRemappedRows() (bool, bool, gpu.Return) {
	var corr, unc, pending, failure uint32
	ret := d.l.call([]string{"nvmlDeviceGetRemappedRows"}, d.h, uintptr(unsafe.Pointer(&corr)), uintptr(unsafe.Pointer(&unc)),
		uintptr(unsafe.Pointer(&pending)), uintptr(unsafe.Pointer(&failure)))
	return pending != 0, failure != 0, ret
}

// GetClocksEventReasons calls the R535 name first; NVML 13 deprecates the
// throttle name, which older drivers only have.
func (d device) GetClocksEventReasons() (uint64, gpu.Return) {
	var v uint64
	ret := d.l.call([]string{"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}, d.h, uintptr(unsafe.Pointer(&v)))
	return v, ret
}

// GetPcieLink reads generation and width; one that fails is 0 and the
// result is the generation's status, or the width's when only it failed.
func (d device) GetPcieLink(max bool) (int, int, gpu.Return) {
	genFn, widthFn := "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth"
	if max {
		genFn, widthFn = "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"
	}
	var gen, width uint32
	ret := d.l.call([]string{genFn}, d.h, uintptr(unsafe.Pointer(&gen)))
	wret := d.l.call([]string{widthFn}, d.h, uintptr(unsafe.Pointer(&width)))
	if ret == gpu.Success {
		ret = wret
	}
	if wret != gpu.Success && gen != 0 {
		ret = gpu.Success // the generation alone is worth having
	}
	return int(gen), int(width), ret
}

func (d device) RegisterXIDEvents(set gpu.NVMLEventSet) gpu.Return {
	s, ok := set.(eventSet)
	if !ok {
		return gpu.ErrorInvalidArgument
	}
	return d.l.call([]string{"nvmlDeviceRegisterEvents"}, d.h, gpu.EventTypeXIDCritical, s.h)
}

// eventSet is an nvmlEventSet_t of l.
type eventSet struct {
	l *library
	h uintptr
}

func (l *library) EventSetCreate() (gpu.NVMLEventSet, gpu.Return) {
	var h uintptr
	ret := l.call([]string{"nvmlEventSetCreate"}, uintptr(unsafe.Pointer(&h)))
	if ret != gpu.Success {
		return nil, ret
	}
	return eventSet{l, h}, ret
}

// eventData is nvmlEventData_t: nvmlDevice_t device; unsigned long long
// eventType, eventData; unsigned int gpuInstanceId, computeInstanceId:
// 32 bytes, laid out by Go as by C.
type eventData struct {
	device              uintptr
	eventType, data     uint64
	gpuInstance, ciInst uint32
}

func (s eventSet) Wait(timeoutMs uint32) (gpu.NVMLDevice, uint64, gpu.Return) {
	var e eventData
	ret := s.l.call([]string{"nvmlEventSetWait_v2", "nvmlEventSetWait"}, s.h, uintptr(unsafe.Pointer(&e)), uintptr(timeoutMs))
	if ret != gpu.Success {
		return nil, 0, ret
	}
	if e.eventType&gpu.EventTypeXIDCritical == 0 {
		return nil, 0, gpu.ErrorNotFound // not an Xid: the caller stops waiting
	}
	var dev gpu.NVMLDevice
	if e.device != 0 {
		dev = device{s.l, e.device}
	}
	return dev, e.data, ret
}

func (s eventSet) Free() gpu.Return {
	return s.l.call([]string{"nvmlEventSetFree"}, s.h)
}
