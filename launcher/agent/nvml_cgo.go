//go:build cgo

package agent

import (
	"time"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/gpu/dlnvml"
)

// probeNVML reads NVML in this process: a cgo build is dynamically linked
// already, so loading libnvidia-ml.so.1 costs nothing in portability.
// xidWait > 0 also waits that long for Xid events (LocalProber.XIDWait).
func probeNVML(host string, xidWait time.Duration) gpu.HostReport {
	return gpu.LocalProber{NVML: dlnvml.Open(), XIDWait: xidWait}.Probe(host)
}
