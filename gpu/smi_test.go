package gpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func auto() Spec        { return Spec{Auto: true} }
func pin(i ...int) Spec { return Spec{List: i} }

func nvmlNotFound() NVML { return noLibrary{} }

// noLibrary is NVML where libnvidia-ml.so.1 is missing: Init says so and
// nothing else may be called.
type noLibrary struct{ NVML }

func (noLibrary) Init() Return { return ErrorLibraryNotFound }

// loadSMI assembles a report from outputs recorded under testdata/smi/name.
func loadSMI(t *testing.T, name string) HostReport {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "smi", name, f))
		require.NoError(t, err)
		return b
	}
	rep, err := ReportFromSMI(name, SMIOutputs{
		GPUs:   read("query-gpu.csv"),
		Apps:   read("compute-apps.csv"),
		MIG:    read("mig.csv"),
		Banner: read("nvidia-smi.txt"),
	})
	require.NoError(t, err)
	return rep
}

func TestReportFromSMIA100(t *testing.T) {
	rep := loadSMI(t, "a100x8")
	assert.Equal(t, SourceSMI, rep.Source)
	assert.Equal(t, "550.54.15", rep.Driver)
	assert.Equal(t, "12.4", rep.CUDA)
	require.Len(t, rep.Devices, 8)
	d1 := rep.Devices[1]
	assert.Equal(t, Device{
		Index: 1, UUID: "GPU-9a1d2c3e-7b44-0f8e-52d6-c1a9e07b3f12", Name: "NVIDIA A100-SXM4-40GB",
		PCIBusID: "00000000:0F:00.0", MemoryTotalMiB: 40960, MemoryUsedMiB: 30127, UtilizationPct: 97,
		Processes: []Process{{PID: 48213, Name: "python", UsedMiB: 30114}},
	}, d1)
	assert.Len(t, rep.Devices[5].Processes, 2)
	assert.Empty(t, rep.Devices[0].Processes)

	sel, err := Select("a100x8", Policy{GPUs: auto(), MaxUsedMiB: 100}, rep)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2, 4, 6, 7}, sel.Indices)

	_, err = Select("a100x8", Policy{GPUs: auto(), MinGPUs: 8, MaxUsedMiB: 100}, rep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GPU 1 busy: pid 48213 python (30114 MiB)")
	assert.Contains(t, err.Error(), "GPU 5 busy: pid 51007 /usr/bin/python3 (19430 MiB), pid 51008 /usr/bin/python3 (19430 MiB)")
	assert.Contains(t, err.Error(), "GPU 3 busy: 2052 MiB used > gpu_max_used_mib 100")
}

func TestReportFromSMIH100Busy(t *testing.T) {
	rep := loadSMI(t, "h100x1")
	require.Len(t, rep.Devices, 1)
	assert.Equal(t, "NVIDIA H100 80GB HBM3", rep.Devices[0].Name)
	assert.Equal(t, "550.90.07", rep.Driver)
	_, err := Select("h100", Policy{GPUs: auto(), MinGPUs: 1, MaxUsedMiB: 100}, rep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GPU 0 busy: pid 31337 /opt/conda/bin/python (40506 MiB)")
}

func TestReportFromSMIPartial(t *testing.T) {
	gpus := []byte("0, GPU-1, Tesla T4, 15360, [N/A], [Not Supported], 00000000:00:1E.0, 470.82.01\n" +
		"1, [N/A], Tesla T4, 15360, 0, 3, [N/A], 470.82.01\n")
	tests := []struct {
		name        string
		o           SMIOutputs
		wantUnknown [][]Field
		// GPU 0 reports no memory use; it is free only if its
		// processes are known to be none.
		wantFree0 bool
	}{
		{name: "only the GPU query worked", o: SMIOutputs{GPUs: gpus},
			wantUnknown: [][]Field{{FieldMemory, FieldUtilization, FieldProcesses, FieldMIG}, {FieldUUID, FieldPCIBusID, FieldProcesses, FieldMIG}}},
		{name: "MIG N/A on pre-Ampere", o: SMIOutputs{GPUs: gpus, Apps: []byte{}, MIG: []byte("0, [N/A]\n1, [N/A]\n")},
			wantUnknown: [][]Field{{FieldMemory, FieldUtilization}, {FieldUUID, FieldPCIBusID}}, wantFree0: true},
		{name: "garbage optional outputs", o: SMIOutputs{GPUs: gpus, Apps: []byte("what"), MIG: []byte("nope")},
			wantUnknown: [][]Field{{FieldMemory, FieldUtilization, FieldProcesses, FieldMIG}, {FieldUUID, FieldPCIBusID, FieldProcesses, FieldMIG}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := ReportFromSMI("t4", tt.o)
			require.NoError(t, err)
			require.Len(t, rep.Devices, 2)
			for i, want := range tt.wantUnknown {
				assert.ElementsMatch(t, want, rep.Devices[i].Unknown, "device %d", i)
			}
			assert.Equal(t, "", rep.CUDA)
			sel, err := Select("t4", Policy{GPUs: auto(), MaxUsedMiB: 100}, rep)
			require.NoError(t, err)
			assert.Equal(t, tt.wantFree0, len(sel.Indices) > 0 && sel.Indices[0] == 0, "selected %v", sel.Indices)
			assert.Contains(t, sel.Indices, 1)
		})
	}
}

func TestParseSMIErrors(t *testing.T) {
	for _, in := range []string{
		"0, GPU-1, Tesla T4, 15360\n",
		"x, GPU-1, Tesla T4, 15360, 0, 0, 00000000:00:1E.0, 470.82.01\n",
		"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
	} {
		_, err := ReportFromSMI("h", SMIOutputs{GPUs: []byte(in)})
		assert.Error(t, err, "%q", in)
	}
	_, err := ParseSMIApps([]byte("GPU-1, 12, python\n"))
	assert.Error(t, err)
	_, err = ParseSMIApps([]byte("GPU-1, pid, python, 3\n"))
	assert.Error(t, err)
}

func TestParseSMIAppsNameWithCommas(t *testing.T) {
	procs, err := ParseSMIApps([]byte("GPU-1, 12, python train.py --a=1,2, 300\nGPU-1, 13, [N/A], [N/A]\n"))
	require.NoError(t, err)
	assert.Equal(t, []Process{{PID: 12, Name: "python train.py --a=1,2", UsedMiB: 300}, {PID: 13, Name: "", UsedMiB: -1}}, procs["GPU-1"])
}
