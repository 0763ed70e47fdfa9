package agent

import (
	"github.com/droverhq/drover/gpu"
)

// probeLocal reads this machine's GPUs: in process when this binary can
// load libraries (built with cgo), else through the NVML reader it
// carries (nvml_static_linux.go).
func probeLocal(host string) gpu.HostReport {
	return probeNVML(host, 0)
}
