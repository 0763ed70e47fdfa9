//go:build cgo

package agent

import (
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/gpu/dlnvml"
)

// probeNVML reads NVML in this process: a cgo build is dynamically linked
// already, so loading libnvidia-ml.so.1 costs nothing in portability.
func probeNVML(host string) gpu.HostReport {
	return gpu.LocalProber{NVML: dlnvml.Open()}.Probe(host)
}
