package dlnvml

import (
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
)

// TestProbeAgreesWithNvidiaSMI runs only where there is a real NVIDIA
// driver (CI has none; the developers run it on a GPU machine). It reads
// the host over NVML, the way `drover agent probe` does, and over
// nvidia-smi, the fallback's exact queries, and requires the two to
// agree on everything that does not move between two reads: identity,
// memory size, driver, CUDA version, MIG mode and the set of compute
// processes. Memory in use and utilisation move, so they are compared
// with a tolerance. Set DROVER_GPU_EXPECT_PROCS=1 while a CUDA program
// runs to require that the probe sees it.
func TestProbeAgreesWithNvidiaSMI(t *testing.T) {
	// A GPU is hardware, not a package .ci/run can install: this test
	// runs where one is, and skips (CI=true or not) where none is.
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver here (/dev/nvidiactl missing)")
	}
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		t.Skip("nvidia-smi not on PATH")
	}
	run := func(args []string) []byte {
		out, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			t.Logf("%v: %v", args, err)
			return nil
		}
		return out
	}
	nv := gpu.LocalProber{NVML: Open()}.Probe("here")
	smi, err := gpu.ReportFromSMI("here", gpu.SMIOutputs{
		GPUs: run(gpu.SMIQueries.GPUs), Apps: run(gpu.SMIQueries.Apps), MIG: run(gpu.SMIQueries.MIG), Banner: run(gpu.SMIQueries.Banner),
	})
	require.NoError(t, err)
	// The health gate's two paths read the same counters: NVML's calls
	// and nvidia-smi's --query-gpu health fields.
	smiHealth, lost, err := gpu.ParseSMIHealth(run(gpu.SMIHealthQuery))
	require.NoError(t, err, "nvidia-smi health fields")
	assert.Empty(t, lost, "no GPU lost")
	for name, r := range map[string]gpu.HostReport{"nvml": nv, "nvidia-smi": smi} {
		b, _ := json.MarshalIndent(r, "", "  ")
		t.Logf("%s: %s\n%s", name, r.Summary(), b)
	}
	require.Equal(t, gpu.SourceNVML, nv.Source, nv.Reason)
	assert.Equal(t, smi.Driver, nv.Driver, "driver version")
	assert.Equal(t, smi.CUDA, nv.CUDA, "CUDA version")
	require.Len(t, nv.Devices, len(smi.Devices), "GPU count")
	for i, d := range nv.Devices {
		s := smi.Devices[i]
		assert.Empty(t, d.Unknown, "GPU %d: NVML fields unknown", i)
		assert.Equal(t, s.Index, d.Index, "GPU %d index", i)
		assert.Equal(t, s.UUID, d.UUID, "GPU %d uuid", i)
		assert.Equal(t, s.Name, d.Name, "GPU %d name", i)
		assert.Equal(t, s.PCIBusID, d.PCIBusID, "GPU %d PCI bus id", i)
		assert.Equal(t, s.MemoryTotalMiB, d.MemoryTotalMiB, "GPU %d memory total", i)
		assert.Equal(t, s.MIG, d.MIG, "GPU %d MIG mode", i)
		// Used memory and utilisation change between the two reads while
		// a program runs; a selection threshold is in the hundreds of MiB.
		assert.InDelta(t, s.MemoryUsedMiB, d.MemoryUsedMiB, 64, "GPU %d memory used", i)
		assert.InDelta(t, s.UtilizationPct, d.UtilizationPct, 50, "GPU %d utilisation", i)
		assert.Equal(t, pids(s.Processes), pids(d.Processes), "GPU %d compute processes", i)
		if sh, ok := smiHealth[d.Index]; ok {
			sameHealth(t, d.Index, sh, d.Health)
		}
		if os.Getenv("DROVER_GPU_EXPECT_PROCS") != "" {
			assert.NotEmpty(t, d.Processes, "GPU %d: a CUDA program runs, the probe must see it", i)
			for _, p := range d.Processes {
				assert.NotEmpty(t, p.Name, "GPU %d pid %d: name from /proc", i, p.PID)
				assert.Positive(t, p.UsedMiB, "GPU %d pid %d: memory", i, p.PID)
			}
		}
	}
}

func pids(ps []gpu.Process) []int {
	out := []int{}
	for _, p := range ps {
		out = append(out, p.PID)
	}
	sort.Ints(out)
	return out
}

// The real library on this machine: without a driver the probe says so;
// on a GPU host it finds devices. Either way no error, no panic.
func TestProbeRealLibrary(t *testing.T) {
	rep := gpu.LocalProber{NVML: Open()}.Probe("here")
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		b, _ := json.MarshalIndent(rep, "", "  ")
		t.Logf("GPU host: %s\n%s", rep.Summary(), b)
		assert.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
		assert.NotEmpty(t, rep.Driver)
		assert.NotEmpty(t, rep.CUDA)
		require.NotEmpty(t, rep.Devices)
		for _, d := range rep.Devices {
			assert.Regexp(t, "^GPU-", d.UUID)
			assert.NotEmpty(t, d.Name)
			assert.Positive(t, d.MemoryTotalMiB)
			assert.NotEmpty(t, d.PCIBusID)
			assert.True(t, d.Known(gpu.FieldMemory))
		}
		return
	}
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Empty(t, rep.Devices)
	assert.Equal(t, gpu.NoDriverReason, rep.Reason)
}

// sameHealth requires NVML's health of GPU i to be what nvidia-smi read:
// the same counters reported (nil where the GPU has none, as page
// retirement on an H200) with the same values. The throttle reasons and
// the current PCIe generation move with the load and are only required
// to be read by both.
func sameHealth(t *testing.T, i int, smi gpu.Health, nv *gpu.Health) {
	t.Helper()
	require.NotNil(t, nv, "GPU %d: NVML read no health counter", i)
	eqU := func(what string, a, b *uint64) {
		if assert.Equal(t, a == nil, b == nil, "GPU %d %s reported by one path only", i, what) && a != nil {
			assert.Equal(t, *a, *b, "GPU %d %s", i, what)
		}
	}
	eqB := func(what string, a, b *bool) {
		if assert.Equal(t, a == nil, b == nil, "GPU %d %s reported by one path only", i, what) && a != nil {
			assert.Equal(t, *a, *b, "GPU %d %s", i, what)
		}
	}
	eqI := func(what string, a, b *int) {
		if assert.Equal(t, a == nil, b == nil, "GPU %d %s reported by one path only", i, what) && a != nil {
			assert.Equal(t, *a, *b, "GPU %d %s", i, what)
		}
	}
	eqU("ECC volatile", smi.ECCVolatile, nv.ECCVolatile)
	eqU("ECC aggregate", smi.ECCAggregate, nv.ECCAggregate)
	eqB("retired pages pending", smi.RetiredPending, nv.RetiredPending)
	eqB("remap pending", smi.RemapPending, nv.RemapPending)
	eqB("remap failure", smi.RemapFailure, nv.RemapFailure)
	eqI("PCIe max generation", smi.PCIeGenMax, nv.PCIeGenMax)
	eqI("PCIe max width", smi.PCIeWidthMax, nv.PCIeWidthMax)
	assert.Equal(t, smi.Throttle == nil, nv.Throttle == nil, "GPU %d throttle reasons reported by one path only", i)
	assert.Equal(t, smi.PCIeGen == nil, nv.PCIeGen == nil, "GPU %d PCIe generation reported by one path only", i)
}

// On a real driver the Xid event set can be made and waited on: the
// health poll listens for Xids through it (XIDSource "nvml"), and a
// healthy machine has no critical finding.
func TestHealthRealLibrary(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver here (/dev/nvidiactl missing)")
	}
	rep := gpu.LocalProber{NVML: Open(), XIDWait: 300 * time.Millisecond}.Probe("here")
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("%s", b)
	require.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
	assert.Equal(t, "nvml", rep.XIDSource, rep.XIDReason)
	for _, d := range rep.Devices {
		require.NotNil(t, d.Health, "GPU %d", d.Index)
		assert.NotNil(t, d.Health.ECCVolatile, "GPU %d: a datacenter GPU reports ECC", d.Index)
		assert.NotNil(t, d.Health.PCIeWidthMax, "GPU %d", d.Index)
	}
	for _, f := range gpu.CheckHealth(rep, gpu.HealthPolicy{IgnoreXIDs: config.DefaultIgnoreXIDs}) {
		assert.False(t, f.Critical, "the machine's GPUs are healthy: %s", f)
	}
}
