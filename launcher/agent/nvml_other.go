//go:build !cgo && !linux

package agent

import (
	"runtime"
	"time"

	"github.com/droverhq/drover/gpu"
)

// probeNVML on a system NVIDIA ships no driver for.
func probeNVML(host string, _ time.Duration) gpu.HostReport {
	return gpu.HostReport{Host: host, Source: gpu.SourceNone, Devices: []gpu.Device{},
		Reason: "nvml: no NVIDIA driver on " + runtime.GOOS}
}
