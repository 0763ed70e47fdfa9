package dlnvml

import (
	"encoding/binary"
	"unsafe"

	"github.com/droverhq/drover/gpu"
)

// device is an nvmlDevice_t of l.
type device struct {
	l *library
	h uintptr
}

// Buffer sizes and struct layouts from nvml.h (NVML API version 12, the
// same since R450 for everything read here).
const (
	uuidSize = 96 // NVML_DEVICE_UUID_V2_BUFFER_SIZE
	nameSize = 96 // NVML_DEVICE_NAME_V2_BUFFER_SIZE
	// nvmlPciInfo_t: char busIdLegacy[16]; unsigned int domain, bus,
	// device, pciDeviceId, pciSubSystemId; char busId[32].
	pciInfoSize  = 68
	pciBusIDAt   = 36
	pciBusIDSize = 32
	// nvmlProcessInfo_t (_v2 and _v3 calls): unsigned int pid; unsigned
	// long long usedGpuMemory; unsigned int gpuInstanceId,
	// computeInstanceId: 24 bytes with padding after pid. The first
	// call's nvmlProcessInfo_v1_t stops after usedGpuMemory: 16 bytes.
	procInfoSize   = 24
	procInfoSizeV1 = 16
)

func (d device) GetIndex() (int, gpu.Return) {
	var v uint32
	ret := d.l.call([]string{"nvmlDeviceGetIndex"}, d.h, uintptr(unsafe.Pointer(&v)))
	return int(v), ret
}

func (d device) GetUUID() (string, gpu.Return) {
	return d.l.stringQuery([]string{"nvmlDeviceGetUUID"}, uuidSize, d.h)
}

func (d device) GetName() (string, gpu.Return) {
	return d.l.stringQuery([]string{"nvmlDeviceGetName"}, nameSize, d.h)
}

func (d device) GetPCIBusID() (string, gpu.Return) {
	// Room to spare in case a later struct version grows at the end.
	buf := make([]byte, 2*pciInfoSize)
	ret := d.l.call([]string{"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, d.h, uintptr(unsafe.Pointer(&buf[0])))
	return cString(buf[pciBusIDAt : pciBusIDAt+pciBusIDSize]), ret
}

// GetMemoryInfo reads nvmlMemory_v2_t where the driver has it. Its used
// leaves out the memory the driver and firmware reserve, as nvidia-smi's
// memory.used does; the first call's used counts that reservation in,
// which on an idle H200 under driver 580 is 615 MiB, six times
// gpu_max_used_mib's default, so every idle GPU of that kind read busy.
// Drivers before R510 have only the first call.
func (d device) GetMemoryInfo() (gpu.MemoryInfo, gpu.Return) {
	// nvmlMemory_v2_t: unsigned int version; (padding) unsigned long
	// long total, reserved, free, used.
	m := memoryV2{version: memoryV2Version}
	ret := d.l.call([]string{"nvmlDeviceGetMemoryInfo_v2"}, d.h, uintptr(unsafe.Pointer(&m)))
	if ret == gpu.Success {
		return gpu.MemoryInfo{Total: m.total, Used: m.used}, ret
	}
	if ret != gpu.ErrorFunctionNotFound && ret != gpu.ErrorArgumentVersionMismatch {
		return gpu.MemoryInfo{}, ret
	}
	// nvmlMemory_t: unsigned long long total, free, used.
	var v1 [3]uint64
	ret = d.l.call([]string{"nvmlDeviceGetMemoryInfo"}, d.h, uintptr(unsafe.Pointer(&v1[0])))
	return gpu.MemoryInfo{Total: v1[0], Used: v1[2]}, ret
}

// memoryV2 is nvmlMemory_v2_t; Go lays it out as C does (40 bytes).
type memoryV2 struct {
	version                     uint32
	total, reserved, free, used uint64
}

// memoryV2Version is nvml.h's nvmlMemory_v2: NVML_STRUCT_VERSION(Memory,
// 2), the struct's size with the version in the top byte.
const memoryV2Version = uint32(unsafe.Sizeof(memoryV2{})) | 2<<24

func (d device) GetUtilizationGPU() (uint32, gpu.Return) {
	// nvmlUtilization_t: unsigned int gpu, memory.
	var u [2]uint32
	ret := d.l.call([]string{"nvmlDeviceGetUtilizationRates"}, d.h, uintptr(unsafe.Pointer(&u[0])))
	return u[0], ret
}

func (d device) GetMigMode() (int, gpu.Return) {
	var cur, pending uint32
	ret := d.l.call([]string{"nvmlDeviceGetMigMode"}, d.h, uintptr(unsafe.Pointer(&cur)), uintptr(unsafe.Pointer(&pending)))
	return int(cur), ret
}

// GetComputeRunningProcesses asks for the count, then for that many (and
// some spare, as processes start between the calls), with the newest call
// the driver has.
func (d device) GetComputeRunningProcesses() ([]gpu.ProcessInfo, gpu.Return) {
	names, size := []string{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}, procInfoSize
	if d.l.sym(names...) == 0 {
		names, size = []string{"nvmlDeviceGetComputeRunningProcesses"}, procInfoSizeV1
	}
	var n uint32
	ret := d.l.call(names, d.h, uintptr(unsafe.Pointer(&n)), 0)
	for try := 0; ret == gpu.ErrorInsufficientSize && try < 3; try++ {
		n += 8
		buf := make([]byte, int(n)*size)
		ret = d.l.call(names, d.h, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&buf[0])))
		if ret == gpu.Success {
			return parseProcs(buf[:int(n)*size], size), ret
		}
	}
	if ret != gpu.Success {
		return nil, ret
	}
	return []gpu.ProcessInfo{}, ret // n was 0
}

// parseProcs reads n structs of size bytes: pid at 0, usedGpuMemory at 8.
func parseProcs(b []byte, size int) []gpu.ProcessInfo {
	out := make([]gpu.ProcessInfo, 0, len(b)/size)
	for off := 0; off+size <= len(b); off += size {
		out = append(out, gpu.ProcessInfo{
			PID:           binary.NativeEndian.Uint32(b[off:]),
			UsedGPUMemory: binary.NativeEndian.Uint64(b[off+8:]),
		})
	}
	return out
}
