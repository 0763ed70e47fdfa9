package dlnvml

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/testenv"
)

// buildFakeNVML compiles testdata/fakenvml.c into dir/libnvidia-ml.so.1.
func buildFakeNVML(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("NVML is loaded on Linux only")
	}
	cc := testenv.LookPath(t, "cc") // builds the fake libnvidia-ml.so.1
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	require.NoError(t, err, "find go-nvml's nvml.h")
	include := filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml")
	dir := t.TempDir()
	build := exec.Command(cc, "-shared", "-fPIC", "-Wall", "-Werror", "-Wno-deprecated-declarations",
		"-I", include, "-o", filepath.Join(dir, gpu.NVMLLibrary), filepath.Join("testdata", "fakenvml.c"))
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	return dir
}

// TestHelperPrintProbe is not a test: the tests below run this binary
// with DROVER_DLNVML_PRINT=1 and LD_LIBRARY_PATH set (the loader reads it
// at start only), and it prints the probe of Open as JSON.
func TestHelperPrintProbe(t *testing.T) {
	if os.Getenv("DROVER_DLNVML_PRINT") != "1" {
		t.Skip("helper for TestFakeLibrary")
	}
	rep := gpu.LocalProber{NVML: Open(), ProcName: func(int) string { return "python" }}.Probe("fake")
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

func probeWith(t *testing.T, libDir string, env ...string) gpu.HostReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPrintProbe$")
	cmd.Env = append(os.Environ(), append([]string{"DROVER_DLNVML_PRINT=1", "LD_LIBRARY_PATH=" + libDir}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	var rep gpu.HostReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	return rep
}

// Every value the fake library returns arrives through the binding: C
// strings, the PCI struct, memory, utilisation, MIG, and the process list
// behind an INSUFFICIENT_SIZE first call.
func TestFakeLibrary(t *testing.T) {
	dir := buildFakeNVML(t)
	rep := probeWith(t, dir)
	require.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
	assert.Empty(t, rep.Reason)
	assert.Equal(t, "550.54.15", rep.Driver)
	assert.Equal(t, "12.4", rep.CUDA)
	require.Len(t, rep.Devices, 2)
	d0, d1 := rep.Devices[0], rep.Devices[1]
	assert.Equal(t, gpu.Device{Index: 0, UUID: "GPU-fa6e0000-0000-4000-8000-000000000000", Name: "NVIDIA H100 80GB HBM3",
		PCIBusID: "00000000:18:00.0", MemoryTotalMiB: 81559, MemoryUsedMiB: 4, Processes: []gpu.Process{}}, d0)
	assert.Equal(t, gpu.Device{Index: 1, UUID: "GPU-fa6e0000-0000-4000-8000-000000000001", Name: "NVIDIA H100 80GB HBM3",
		PCIBusID: "00000000:19:00.0", MemoryTotalMiB: 81559, MemoryUsedMiB: 30004, UtilizationPct: 97, MIG: true,
		Processes: []gpu.Process{{PID: 4242, Name: "python", UsedMiB: 30000}, {PID: 4243, Name: "python", UsedMiB: -1}}}, d1)
}

func TestFakeLibraryInitFails(t *testing.T) {
	dir := buildFakeNVML(t)
	rep := probeWith(t, dir, "FAKE_NVML_INIT=9") // NVML_ERROR_DRIVER_NOT_LOADED
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Equal(t, "nvml: NVIDIA kernel driver not loaded", rep.Reason)
	rep = probeWith(t, dir, "FAKE_NVML_INIT=4")
	assert.Equal(t, "nvml: init: insufficient permissions", rep.Reason)
}

// Memory in use is what the driver allocated to processes, not what it
// reserves for itself: read through nvmlDeviceGetMemoryInfo_v2, whose used
// leaves the reservation out, else through the first call. An idle H200
// under driver 580 read 615 MiB through the first call (0 in nvidia-smi),
// and every such GPU was planned as busy.
func TestFakeLibraryMemoryLeavesOutReserved(t *testing.T) {
	dir := buildFakeNVML(t)
	for _, tc := range []struct {
		v2       string
		wantUsed int64
		wantFree []int
	}{
		{"", 4, []int{0}},              // _v2 answers: the reservation left out
		{"missing", 4 + 611, []int{}},  // a driver before R510: the first call's used
		{"mismatch", 4 + 611, []int{}}, // a driver that knows another struct version
	} {
		t.Run("v2="+tc.v2, func(t *testing.T) {
			rep := probeWith(t, dir, "FAKE_NVML_MEMORY_V2="+tc.v2)
			require.Len(t, rep.Devices, 2, rep.Reason)
			assert.Equal(t, tc.wantUsed, rep.Devices[0].MemoryUsedMiB)
			assert.Equal(t, int64(81559), rep.Devices[0].MemoryTotalMiB)
			// GPU 1 is busy (processes); GPU 0 is free by the default rule
			// exactly when the reservation is left out.
			sel, err := gpu.Select(config.Host{Name: "fake", GPUs: config.GPUSpec{Auto: true}},
				config.Job{GPUMaxUsedMiB: config.DefaultGPUMaxUsedMiB}, rep)
			require.NoError(t, err)
			assert.Equal(t, tc.wantFree, sel.Indices)
		})
	}
}
