//go:build cgo

package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// busyDGX: GPU 1 runs python (pid 4242), GPU 5 has 2 GiB used by a process
// NVML cannot see (another container), GPU 3 has MIG enabled, GPU 6
// reports neither utilisation nor processes.
func busyDGX() *dgxa100.Server {
	return dgx(func(i int, d *dgxa100.Device) {
		switch i {
		case 1:
			busy(d, 97, map[uint32]uint64{4242: 30000})
		case 3:
			d.MigMode = nvml.DEVICE_MIG_ENABLE
		case 5:
			d.MemoryInfo.Used = 2052 * mib
		case 6:
			notSupported(d)
		}
	})
}

func TestSelect(t *testing.T) {
	idle := probeMock(dgx(nil))
	busyRep := probeMock(busyDGX())
	unknownAll := probeMock(dgx(func(i int, d *dgxa100.Device) {
		if i == 0 {
			notSupported(d)
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
		}
	}))
	noDriver := HostReport{Host: "h1", Source: SourceNone, Devices: []Device{},
		Reason: "nvml: libnvidia-ml.so.1 not found: no NVIDIA driver"}

	tests := []struct {
		name         string
		host         string
		p            Policy
		rep          HostReport
		want         []int
		wantSkipped  map[int]string
		wantWarnings []string
		wantErr      []string // substrings
	}{
		{name: "auto idle", host: "h0", p: Policy{GPUs: auto(), MaxUsedMiB: 100}, rep: idle,
			want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "auto busy, MIG, unsupported", host: "h0", p: Policy{GPUs: auto(), MaxUsedMiB: 100}, rep: busyRep,
			want: []int{0, 2, 4, 6, 7},
			wantSkipped: map[int]string{
				1: "busy: pid 4242 python (30000 MiB)",
				3: MIGSkipReason,
				5: "busy: 2052 MiB used > gpu_max_used_mib 100",
			}},
		{name: "gpu_max_used_mib tolerates", host: "h0", p: Policy{GPUs: auto(), MaxUsedMiB: 4096}, rep: busyRep,
			want: []int{0, 2, 4, 5, 6, 7}},
		{name: "min_gpus met", host: "h0", p: Policy{GPUs: auto(), MinGPUs: 5, MaxUsedMiB: 100}, rep: busyRep,
			want: []int{0, 2, 4, 6, 7}},
		{name: "min_gpus 6 short", host: "h0", p: Policy{GPUs: auto(), MinGPUs: 6, MaxUsedMiB: 100}, rep: busyRep,
			want:    []int{0, 2, 4, 6, 7},
			wantErr: []string{"5 of 8 GPUs usable, min_gpus is 6", "GPU 1 busy: pid 4242 python (30000 MiB)", "GPU 3 " + MIGSkipReason, "GPU 5 busy: 2052 MiB"}},
		{name: "min_gpus 8 short", host: "h0", p: Policy{GPUs: auto(), MinGPUs: 8, MaxUsedMiB: 100}, rep: busyRep,
			want:    []int{0, 2, 4, 6, 7},
			wantErr: []string{"min_gpus is 8", "pid 4242 python"}},
		{name: "pinned", host: "h0", p: Policy{GPUs: pin(2, 0), MaxUsedMiB: 100}, rep: busyRep,
			want:        []int{0, 2},
			wantSkipped: map[int]string{1: "not in gpus = [2, 0]", 7: "not in gpus = [2, 0]"}},
		{name: "pinned busy is used with a warning", host: "h0", p: Policy{GPUs: pin(1, 2), MinGPUs: 2, MaxUsedMiB: 100}, rep: busyRep,
			want:         []int{1, 2},
			wantWarnings: []string{"pinned GPU 1 is used anyway: busy: pid 4242 python (30000 MiB)"}},
		{name: "pinned MIG is used with a warning", host: "h0", p: Policy{GPUs: pin(3), MaxUsedMiB: 100}, rep: busyRep,
			want:         []int{3},
			wantWarnings: []string{"pinned GPU 3 is used anyway: " + MIGSkipReason}},
		{name: "pinned missing", host: "h0", p: Policy{GPUs: pin(0, 9), MaxUsedMiB: 100}, rep: busyRep,
			wantErr: []string{"gpus = [0, 9]: GPU 9 does not exist", "GPUs 0, 1, 2, 3, 4, 5, 6, 7"}},
		{name: "pinned on host without driver", host: "h1", p: Policy{GPUs: pin(0), MaxUsedMiB: 100}, rep: noDriver,
			wantErr: []string{"GPU 0 does not exist", "libnvidia-ml.so.1 not found"}},
		{name: "pinned twice", host: "h0", p: Policy{GPUs: pin(0, 0), MaxUsedMiB: 100}, rep: idle,
			wantErr: []string{"lists GPU 0 twice"}},
		{name: "auto without driver", host: "h1", p: Policy{GPUs: auto(), MaxUsedMiB: 100}, rep: noDriver,
			want:         []int{},
			wantWarnings: []string{`gpus = "auto" found no GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)`}},
		{name: "auto without driver, min_gpus", host: "h1", p: Policy{GPUs: auto(), MinGPUs: 1, MaxUsedMiB: 100}, rep: noDriver,
			want:         []int{},
			wantErr:      []string{"0 of 0 GPUs usable, min_gpus is 1", "libnvidia-ml.so.1 not found"},
			wantWarnings: []string{`gpus = "auto" found no GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)`}},
		{name: "no gpus wanted", host: "h0", p: Policy{MinGPUs: 4, MaxUsedMiB: 100}, rep: idle,
			want: []int{}, wantSkipped: map[int]string{0: "gpus = []"}},
		{name: "state unknown", host: "h0", p: Policy{GPUs: auto(), MaxUsedMiB: 100}, rep: unknownAll,
			want:        []int{1, 2, 3, 4, 5, 6, 7},
			wantSkipped: map[int]string{0: "unknown state: neither memory use nor processes reported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Select(tt.host, tt.p, tt.rep)
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
			} else {
				require.NoError(t, err)
			}
			if tt.want != nil {
				assert.Equal(t, tt.want, sel.Indices)
				require.Len(t, sel.Devices, len(tt.want))
				for i, d := range sel.Devices {
					assert.Equal(t, tt.want[i], d.Index)
				}
			}
			skipped := map[int]string{}
			for _, s := range sel.Skipped {
				skipped[s.Index] = s.Why
			}
			for i, why := range tt.wantSkipped {
				assert.Equal(t, why, skipped[i], "skip reason of GPU %d", i)
			}
			if tt.want != nil && err == nil {
				assert.Len(t, sel.Skipped, len(tt.rep.Devices)-len(sel.Indices), "every GPU is selected or skipped")
			}
			assert.Equal(t, tt.wantWarnings, sel.Warnings)
		})
	}
}
