package agent

import "github.com/droverhq/drover/gpu"

// probeLocal reads this machine's GPUs.
func probeLocal(host string) gpu.HostReport {
	return gpu.ProbeLocal(host)
}
