//go:build !linux

package dlnvml

import "github.com/droverhq/drover/gpu"

// Open returns NVML for a system NVIDIA ships no driver for: Init answers
// gpu.ErrorLibraryNotFound.
func Open() gpu.NVML { return none{} }

type none struct{ gpu.NVML }

func (none) Init() gpu.Return { return gpu.ErrorLibraryNotFound }
