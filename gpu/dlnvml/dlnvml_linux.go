package dlnvml

import (
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/droverhq/drover/gpu"
)

// Open returns NVML as loaded from gpu.NVMLLibrary. Nothing is loaded
// until Init, which answers gpu.ErrorLibraryNotFound when the library
// cannot be loaded.
func Open() gpu.NVML { return &library{} }

type library struct {
	once   sync.Once
	handle uintptr
	syms   map[string]uintptr
}

// sym returns the address of the first of names the library has, or 0.
func (l *library) sym(names ...string) uintptr {
	for _, n := range names {
		if p, ok := l.syms[n]; ok {
			if p != 0 {
				return p
			}
			continue
		}
		p, err := purego.Dlsym(l.handle, n)
		if err != nil {
			p = 0
		}
		l.syms[n] = p
		if p != 0 {
			return p
		}
	}
	return 0
}

// call calls the first of names with args; a library without any of them
// answers gpu.ErrorFunctionNotFound.
func (l *library) call(names []string, args ...uintptr) gpu.Return {
	if l.handle == 0 {
		return gpu.ErrorUninitialized
	}
	fn := l.sym(names...)
	if fn == 0 {
		return gpu.ErrorFunctionNotFound
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return gpu.Return(int32(r))
}

func (l *library) Init() gpu.Return {
	l.once.Do(func() {
		h, err := purego.Dlopen(gpu.NVMLLibrary, purego.RTLD_LAZY|purego.RTLD_LOCAL)
		if err == nil {
			l.handle, l.syms = h, map[string]uintptr{}
		}
	})
	if l.handle == 0 {
		return gpu.ErrorLibraryNotFound
	}
	return l.call([]string{"nvmlInit_v2", "nvmlInit"})
}

func (l *library) Shutdown() gpu.Return { return l.call([]string{"nvmlShutdown"}) }

func (l *library) HasSymbol(symbol string) bool {
	return l.handle != 0 && l.sym(symbol) != 0
}

// stringQuery calls f(buf, len(buf)) and returns the C string it wrote.
func (l *library) stringQuery(names []string, size int, pre ...uintptr) (string, gpu.Return) {
	buf := make([]byte, size)
	args := append(pre, uintptr(unsafe.Pointer(&buf[0])), uintptr(size))
	ret := l.call(names, args...)
	return cString(buf), ret
}

func (l *library) SystemGetDriverVersion() (string, gpu.Return) {
	return l.stringQuery([]string{"nvmlSystemGetDriverVersion"}, 80)
}

func (l *library) SystemGetCudaDriverVersion() (int, gpu.Return) {
	var v int32
	ret := l.call([]string{"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"}, uintptr(unsafe.Pointer(&v)))
	return int(v), ret
}

func (l *library) DeviceGetCount() (int, gpu.Return) {
	var n uint32
	ret := l.call([]string{"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, uintptr(unsafe.Pointer(&n)))
	return int(n), ret
}

func (l *library) DeviceGetHandleByIndex(i int) (gpu.NVMLDevice, gpu.Return) {
	var h uintptr
	ret := l.call([]string{"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, uintptr(i), uintptr(unsafe.Pointer(&h)))
	if ret != gpu.Success {
		return nil, ret
	}
	return device{l, h}, ret
}

// cString is the bytes of b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
