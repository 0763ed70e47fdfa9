//go:build cgo

package gpu

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./gpu -update to create it")
	assert.Equal(t, string(want), string(got), "golden %s differs; run go test ./gpu -run %s -update if the change is intended", path, t.Name())
}

// selectHost is a host's name and the policy drover probe selects with.
type selectHost struct {
	name string
	p    Policy
}

// results selects on each report as drover probe does.
func results(t *testing.T, hosts []selectHost, reps []HostReport) []HostResult {
	t.Helper()
	require.Equal(t, len(hosts), len(reps))
	var rs []HostResult
	for i, h := range hosts {
		reps[i].Host = h.name
		sel, err := Select(h.name, h.p, reps[i])
		rs = append(rs, HostResult{Report: reps[i], Selection: sel, Err: err})
	}
	return rs
}

func mockFleet(t *testing.T) []HostResult {
	hosts := []selectHost{
		{"dgx0", Policy{GPUs: auto(), MaxUsedMiB: 100}},
		{"dgx1", Policy{GPUs: pin(1, 2), MaxUsedMiB: 100}},
		{"cpu2", Policy{GPUs: auto(), MaxUsedMiB: 100}},
		{"dgx3", Policy{GPUs: auto(), MinGPUs: 8, MaxUsedMiB: 100}},
	}
	noDriver := LocalProber{NVML: nvmlNotFound()}.Probe("cpu2")
	reps := []HostReport{probeMock(busyDGX()), probeMock(busyDGX()), noDriver, probeMock(busyDGX())}
	return results(t, hosts, reps)
}

func TestRenderTableMock(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, RenderTable(&b, mockFleet(t)))
	golden(t, "render-mock.golden", b.Bytes())
}

func TestRenderJSONMock(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, RenderJSON(&b, mockFleet(t)))
	golden(t, "render-mock.json.golden", b.Bytes())

	// What scripts rely on: a flat array with selected/error per host.
	var got []struct {
		Host     string `json:"host"`
		Source   string `json:"source"`
		Reason   string `json:"reason"`
		Selected []int  `json:"selected"`
		Error    string `json:"error"`
		Devices  []Device
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Len(t, got, 4)
	assert.Equal(t, []int{0, 2, 4, 6, 7}, got[0].Selected)
	assert.Equal(t, []int{1, 2}, got[1].Selected)
	assert.Equal(t, SourceNone, got[2].Source)
	assert.Contains(t, got[2].Reason, "libnvidia-ml.so.1 not found")
	assert.Equal(t, []int{}, got[2].Selected)
	assert.Contains(t, got[3].Error, "min_gpus is 8")
	assert.Equal(t, []Field{FieldUtilization, FieldProcesses}, got[0].Devices[6].Unknown)
}

func TestRenderTableSMI(t *testing.T) {
	for _, name := range []string{"a100x8", "h100x1"} {
		t.Run(name, func(t *testing.T) {
			rep := loadSMI(t, name)
			rs := results(t, []selectHost{{name, Policy{GPUs: auto(), MaxUsedMiB: 100}}}, []HostReport{rep})
			var b bytes.Buffer
			require.NoError(t, RenderTable(&b, rs))
			golden(t, "render-smi-"+name+".golden", b.Bytes())
		})
	}
}

// Rendering a host with no GPUs at all prints no table, only the reason.
func TestRenderTableNoGPUs(t *testing.T) {
	rs := []HostResult{{Report: HostReport{Host: "h1", Source: SourceNone,
		Reason: "nvml: libnvidia-ml.so.1 not found: no NVIDIA driver"}}}
	var b bytes.Buffer
	require.NoError(t, RenderTable(&b, rs))
	assert.Equal(t, "h1: 0 GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)\n", b.String())
}

// The agent's JSON must survive the trip through JSON unchanged, since
// that is how it reaches drover.
func TestHostReportJSONRoundTrip(t *testing.T) {
	for _, rep := range []HostReport{probeMock(busyDGX()), loadSMI(t, "h100x1"), LocalProber{NVML: nvmlNotFound()}.Probe("x")} {
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		var back HostReport
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, rep, back)
	}
}

// Without a selection (drover agent probe) the table shows what is there
// and claims nothing about selection.
func TestRenderTableWithoutSelection(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, RenderTable(&b, []HostResult{{Report: loadSMI(t, "h100x1")}}))
	golden(t, "render-noselection.golden", b.Bytes())
	assert.NotContains(t, b.String(), "selected")
}
