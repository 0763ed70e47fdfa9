package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
)

// Health reads the GPU health of the host behind t through the agent at
// remotePath (`drover agent health --json`), which reads NVML or, where
// NVML cannot be loaded, nvidia-smi, and the kernel log's Xids. xidWait >
// 0 makes the agent listen that long for NVML's Xid events. An error
// means the agent could not answer; a host without GPUs answers with no
// devices.
func Health(ctx context.Context, t cluster.Transport, remotePath string, xidWait time.Duration) (gpu.HostReport, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout+xidWait)
	defer cancel()
	out, err := output(ctx, t, agent.HealthCommand(remotePath, xidWait)...)
	if err != nil {
		return gpu.HostReport{}, fmt.Errorf("read GPU health on %s: %w", t.Host().Name, err)
	}
	var rep gpu.HostReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("read GPU health on %s: parse %s agent health --json: %w", t.Host().Name, remotePath, err)
	}
	rep.Host = t.Host().Name
	return rep, nil
}
