//go:build cgo

package gpu

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dgx is go-nvml's DGX A100 model made deterministic (UUIDs, PCI bus ids)
// and completed with the queries the model leaves unset (utilisation and
// processes), all idle. tweak then makes devices busy, MIG or unsupported.
func dgx(tweak func(i int, d *dgxa100.Device)) *dgxa100.Server {
	s := dgxa100.New()
	for i, nd := range s.Devices {
		d := nd.(*dgxa100.Device)
		d.UUID = fmt.Sprintf("GPU-a100a100-0000-4000-8000-00000000000%d", i)
		bus := fmt.Sprintf("00000000:%02X:00.0", []int{0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD}[i])
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j := 0; j < len(bus); j++ {
				p.BusId[j] = int8(bus[j])
			}
			return p, nvml.SUCCESS
		}
		d.MemoryInfo.Used = 4 * mib
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{}, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return nil, nvml.SUCCESS
		}
		if tweak != nil {
			tweak(i, d)
		}
	}
	return s
}

// busy makes d run processes (pid -> MiB) at util percent.
func busy(d *dgxa100.Device, util uint32, procs map[uint32]uint64) {
	var infos []nvml.ProcessInfo
	var total uint64
	for pid, m := range procs {
		infos = append(infos, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: m * mib})
		total += m
	}
	d.MemoryInfo.Used = (total + 4) * mib
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: util, Memory: util / 2}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return infos, nvml.SUCCESS
	}
}

func notSupported(d *dgxa100.Device) {
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
}

var procNames = map[int]string{4242: "python", 4343: "pt_main_thread", 5151: "jupyter-lab"}

func probeMock(lib nvml.Interface) HostReport {
	return LocalProber{NVML: goNVMLLib(lib), ProcName: func(pid int) string { return procNames[pid] }}.Probe("dgx1")
}

func TestProbeDGXIdle(t *testing.T) {
	rep := probeMock(dgx(nil))
	require.Equal(t, SourceNVML, rep.Source, rep.Reason)
	assert.Empty(t, rep.Reason)
	assert.Equal(t, "550.54.15", rep.Driver)
	assert.Equal(t, "12.4", rep.CUDA)
	require.Len(t, rep.Devices, 8)
	for i, d := range rep.Devices {
		assert.Equal(t, i, d.Index)
		assert.Equal(t, "Mock NVIDIA A100-SXM4-40GB", d.Name)
		assert.Equal(t, int64(40960), d.MemoryTotalMiB)
		assert.Equal(t, int64(4), d.MemoryUsedMiB)
		assert.Empty(t, d.Unknown, "device %d", i)
		assert.Empty(t, d.Processes)
		assert.False(t, d.MIG)
	}
	assert.Equal(t, "GPU-a100a100-0000-4000-8000-000000000003", rep.Devices[3].UUID)
	assert.Equal(t, "00000000:4E:00.0", rep.Devices[3].PCIBusID)
}

func TestProbeDGXBusyMIGAndUnsupported(t *testing.T) {
	lib := dgx(func(i int, d *dgxa100.Device) {
		switch i {
		case 1:
			busy(d, 97, map[uint32]uint64{4242: 30000})
		case 3:
			d.MigMode = nvml.DEVICE_MIG_ENABLE
		case 6:
			notSupported(d)
		case 7:
			d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 999, UsedGpuMemory: valueNotAvailable}}, nvml.SUCCESS
			}
		}
	})
	rep := probeMock(lib)
	require.Len(t, rep.Devices, 8)

	d1 := rep.Devices[1]
	assert.Equal(t, 97, d1.UtilizationPct)
	assert.Equal(t, int64(30004), d1.MemoryUsedMiB)
	assert.Equal(t, []Process{{PID: 4242, Name: "python", UsedMiB: 30000}}, d1.Processes)

	assert.True(t, rep.Devices[3].MIG)

	d6 := rep.Devices[6]
	assert.ElementsMatch(t, []Field{FieldUtilization, FieldProcesses}, d6.Unknown,
		"MIG NOT_SUPPORTED means no MIG, not an unknown mode")
	assert.False(t, d6.MIG)
	assert.True(t, d6.Known(FieldMemory))

	assert.Equal(t, []Process{{PID: 999, Name: "", UsedMiB: -1}}, rep.Devices[7].Processes)
}

// A query the mock does not implement panics inside go-nvml's mock; the
// probe must report the field unknown instead.
func TestProbeSurvivesUnimplementedQueries(t *testing.T) {
	lib := dgx(func(i int, d *dgxa100.Device) {
		d.GetUtilizationRatesFunc = nil
		d.GetComputeRunningProcessesFunc = nil
		if i == 2 {
			d.GetMemoryInfoFunc = nil
			d.GetNameFunc = nil
		}
	})
	rep := probeMock(lib)
	require.Len(t, rep.Devices, 8)
	assert.ElementsMatch(t, []Field{FieldUtilization, FieldProcesses}, rep.Devices[0].Unknown)
	assert.ElementsMatch(t, []Field{FieldUtilization, FieldProcesses, FieldMemory, FieldName}, rep.Devices[2].Unknown)
}

func TestProbeNVMLFailures(t *testing.T) {
	tests := []struct {
		name       string
		lib        func() nvml.Interface
		wantSource string
		wantReason string
		wantN      int
	}{
		{
			name: "no driver",
			lib: func() nvml.Interface {
				return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
			},
			wantSource: SourceNone,
			wantReason: "nvml: libnvidia-ml.so.1 not found: no NVIDIA driver",
		},
		{
			name: "kernel module not loaded",
			lib: func() nvml.Interface {
				return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
			},
			wantSource: SourceNone,
			wantReason: "nvml: NVIDIA kernel driver not loaded",
		},
		{
			name: "init panics",
			lib: func() nvml.Interface {
				return &mock.Interface{}
			},
			wantSource: SourceNone,
			wantReason: "nvml: init: ",
		},
		{
			name: "one GPU lost",
			lib: func() nvml.Interface {
				s := dgx(nil)
				s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == 4 {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return s.Devices[i], nvml.SUCCESS
				}
				return s
			},
			wantSource: SourceNVML,
			wantReason: "nvml: GPU 4: ",
			wantN:      7,
		},
		{
			name: "zero GPUs",
			lib: func() nvml.Interface {
				s := dgx(nil)
				s.Devices = nil
				return s
			},
			wantSource: SourceNVML,
			wantReason: "nvml: driver loaded but NVML reports 0 GPUs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := probeMock(tt.lib())
			assert.Equal(t, tt.wantSource, rep.Source)
			assert.True(t, strings.HasPrefix(rep.Reason, tt.wantReason), "reason %q", rep.Reason)
			assert.Len(t, rep.Devices, tt.wantN)
			assert.NotNil(t, rep.Devices, "JSON must say [] not null")
		})
	}
}

func TestProcComm(t *testing.T) {
	assert.NotEmpty(t, procComm(os.Getpid()))
	assert.Empty(t, procComm(1<<30), "a pid that cannot exist")
}
