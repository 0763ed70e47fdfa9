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
	"time"

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
	p := gpu.LocalProber{NVML: Open(), ProcName: func(int) string { return "python" }}
	if w, err := time.ParseDuration(os.Getenv("DROVER_DLNVML_XIDWAIT")); err == nil {
		p.XIDWait = w
	}
	rep := p.Probe("fake")
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
	require.NotNil(t, d0.Health)
	require.NotNil(t, d1.Health)
	assert.Equal(t, soundHealth(), *d0.Health)
	assert.Equal(t, soundHealth(), *d1.Health)
	d0.Health, d1.Health = nil, nil
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
			sel, err := gpu.Select("fake", gpu.Policy{GPUs: gpu.Spec{Auto: true},
				MaxUsedMiB: config.DefaultGPUMaxUsedMiB}, rep)
			require.NoError(t, err)
			assert.Equal(t, tc.wantFree, sel.Indices)
		})
	}
}

func ptr[T any](v T) *T { return &v }

// soundHealth is what a sound GPU of the fake reports: an H200's answers
// (no page retirement, rows not remapped, no clock events, PCIe gen 5 x16).
func soundHealth() gpu.Health {
	return gpu.Health{ECCVolatile: ptr(uint64(0)), ECCAggregate: ptr(uint64(0)), RemapPending: ptr(false), RemapFailure: ptr(false),
		Throttle: ptr(uint64(0)), PCIeGen: ptr(5), PCIeGenMax: ptr(5), PCIeWidth: ptr(16), PCIeWidthMax: ptr(16)}
}

// Every health finding arrives through the binding from the fake library
// (its calls compiled against nvml.h): each case makes GPU 1 unhealthy one
// way, and CheckHealth names it with the right severity. GPU 0 stays sound
// and draws no finding.
func TestFakeLibraryHealth(t *testing.T) {
	dir := buildFakeNVML(t)
	policy := gpu.HealthPolicy{IgnoreXIDs: config.DefaultIgnoreXIDs}
	for _, tc := range []struct {
		sick     string
		critical bool
		what     string
	}{
		{"ecc", true, "1 uncorrectable ECC error(s) since the driver loaded"},
		{"aggregate", false, "3 uncorrectable ECC error(s) over the GPU's life"},
		{"retired", true, "retired pages pending"},
		{"remap-failure", true, "row remapping failed"},
		{"remap-pending", true, "row remapping pending"},
		{"throttle", false, "clocks throttled: hardware thermal slowdown (reasons 0x44)"},
		{"pcie", false, "PCIe link x8 of x16"},
		{"xid", true, "Xid 79"},
		{"lost", true, "GPU is lost"},
	} {
		t.Run(tc.sick, func(t *testing.T) {
			rep := probeWith(t, dir, "FAKE_NVML_HEALTH="+tc.sick, "DROVER_DLNVML_XIDWAIT=200ms")
			require.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
			assert.Equal(t, "nvml", rep.XIDSource, rep.XIDReason)
			fs := gpu.CheckHealth(rep, policy)
			require.Len(t, fs, 1, "%v", fs)
			assert.Equal(t, "GPU 1", fs[0].GPU)
			assert.Equal(t, tc.critical, fs[0].Critical)
			assert.Contains(t, fs[0].What, tc.what)
			assert.NotEmpty(t, fs[0].Fix)
		})
	}
	t.Run("sound", func(t *testing.T) {
		rep := probeWith(t, dir, "DROVER_DLNVML_XIDWAIT=100ms")
		assert.Empty(t, gpu.CheckHealth(rep, policy))
	})
}
