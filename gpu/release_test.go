//go:build cgo

package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
)

// TestWaitReleased reads go-nvml's mock DGX through the real prober: GPU 0
// frees after a few probes, GPU 1 stays held by the job's pid 4242, GPU 2
// runs a foreign process (5151, there before the attempt) that is not the
// job's to wait for.
func TestWaitReleased(t *testing.T) {
	probes := 0
	server := dgx(func(i int, d *dgxa100.Device) {
		switch i {
		case 0:
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				if probes < 3 {
					return []nvml.ProcessInfo{{Pid: 4343, UsedGpuMemory: 100 * mib}}, nvml.SUCCESS
				}
				return nil, nvml.SUCCESS
			}
		case 1:
			busy(d, 90, map[uint32]uint64{4242: 30000})
		case 2:
			busy(d, 10, map[uint32]uint64{5151: 500})
		}
	})
	probe := func(context.Context) HostReport {
		probes++
		return probeMock(server)
	}
	before := map[int][]int{2: {5151}}
	ctx := context.Background()

	tests := []struct {
		name string
		gpus []int
		want []Held
	}{
		{"released after a few probes", []int{0}, nil},
		{"a foreign process is not waited for", []int{0, 2}, nil},
		{"held for good", []int{0, 1, 2}, []Held{{GPU: 1, Process: Process{PID: 4242, Name: "python", UsedMiB: 30000}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probes = 0
			got := WaitReleased(ctx, probe, tt.gpus, before, 200*time.Millisecond, 10*time.Millisecond)
			assert.Equal(t, tt.want, got)
			assert.GreaterOrEqual(t, probes, 3, "waited for GPU 0")
		})
	}
	assert.Equal(t, "GPU 1 held by pid 4242 python (30000 MiB)", Held{GPU: 1, Process: Process{PID: 4242, Name: "python", UsedMiB: 30000}}.String())
	assert.Equal(t, map[int][]int{1: {4242}, 2: {5151}}, Pids(probeMock(dgx(func(i int, d *dgxa100.Device) {
		switch i {
		case 1:
			busy(d, 90, map[uint32]uint64{4242: 30000})
		case 2:
			busy(d, 10, map[uint32]uint64{5151: 500})
		}
	}))))
}
