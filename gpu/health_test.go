package gpu

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

// The forms a real H200 under driver 580 printed for the health fields
// (testdata/h200/query-health.txt): a count, "[N/A]" for page retirement
// (H200 remaps rows instead), "No" for the remap states, a hex bitmask for
// the clock event reasons, plain numbers for the PCIe link.
func TestParseSMIHealthRealH200(t *testing.T) {
	out := []byte("0, 0, 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16\n")
	h, lost, err := ParseSMIHealth(out)
	require.NoError(t, err)
	assert.Empty(t, lost)
	require.Contains(t, h, 0)
	got := h[0]
	assert.Equal(t, uint64(0), *got.ECCVolatile)
	assert.Equal(t, uint64(0), *got.ECCAggregate)
	assert.Nil(t, got.RetiredPending, "[N/A] is not reported, not false")
	assert.False(t, *got.RemapPending)
	assert.False(t, *got.RemapFailure)
	assert.Equal(t, uint64(0), *got.Throttle)
	assert.Equal(t, 5, *got.PCIeGen)
	assert.Equal(t, 16, *got.PCIeWidthMax)
	rep := HostReport{Host: "h200", Devices: []Device{{Index: 0}}}
	AddSMIHealth(&rep, h, lost)
	assert.Empty(t, CheckHealth(rep, HealthPolicy{IgnoreXIDs: config.DefaultIgnoreXIDs}), "a sound H200 has no finding")
}

func TestParseSMIHealthFindings(t *testing.T) {
	out := []byte(`0, 0, 0, No, No, No, 0x0000000000000000, 4, 4, 16, 16
1, 1, 1, Yes, Yes, Yes, 0x00000000000000C4, 3, 4, 8, 16
Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU
`)
	h, lost, err := ParseSMIHealth(out)
	require.NoError(t, err)
	assert.Equal(t, []string{"0000:3B:00.0"}, lost)
	rep := HostReport{Host: "h2", Devices: []Device{{Index: 0}, {Index: 1}}}
	AddSMIHealth(&rep, h, lost)
	var crit, warn []string
	for _, f := range CheckHealth(rep, HealthPolicy{}) {
		if f.Critical {
			crit = append(crit, f.GPU+": "+f.What)
		} else {
			warn = append(warn, f.GPU+": "+f.What)
		}
	}
	assert.Equal(t, []string{
		"GPU 0000:3B:00.0: GPU is lost (fell off the bus or stopped answering)",
		"GPU 1: 1 uncorrectable ECC error(s) since the driver loaded (ecc.errors.uncorrected.volatile.total)",
		"GPU 1: retired pages pending",
		"GPU 1: row remapping failed (no spare rows left)",
	}, crit)
	assert.Equal(t, []string{
		"GPU 1: clocks throttled: hardware thermal slowdown (reasons 0xc4)",
		"GPU 1: clocks throttled: hardware power brake slowdown (reasons 0xc4)",
		"GPU 1: PCIe link x8 of x16",
		"GPU 1: PCIe link gen 3 of 4 while the job runs",
	}, warn)
	for _, f := range CheckHealth(rep, HealthPolicy{Idle: true}) {
		assert.NotContains(t, f.What, "gen 3 of 4", "idle GPUs lower their PCIe generation to save power")
	}
}

func TestParseSMIHealthBadLine(t *testing.T) {
	_, _, err := ParseSMIHealth([]byte("0, 0\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want 11 fields")
}

// Kernel log lines (a /dev/kmsg record and a dmesg line) are matched to the
// GPU by PCI address; ignore_xids turns a finding into a warning.
func TestKernelXIDs(t *testing.T) {
	devs := []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}, {Index: 1, PCIBusID: "00000000:3B:00.0"}}
	log := []byte(`3,1201,812345678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.
[ 812.5] NVRM: Xid (0000:18:00): 13, pid=4243, Graphics Exception
6,1202,812345999,-;eth0: link up
[ 813.0] NVRM: Xid (PCI:0000:99:00): 48, pid=1, DBE
`)
	xs := ParseKernelXIDs(log, devs)
	require.Len(t, xs, 3)
	assert.Equal(t, XID{GPU: 1, PCI: "0000:3B:00", Code: 79, Text: "pid=4242, name=python3, GPU has fallen off the bus.",
		Key: "3,1201,812345678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."}, xs[0])
	assert.Equal(t, 0, xs[1].GPU)
	assert.Equal(t, -1, xs[2].GPU)
	fs := CheckHealth(HostReport{Host: "h", XIDs: xs}, HealthPolicy{IgnoreXIDs: config.DefaultIgnoreXIDs})
	require.Len(t, fs, 3)
	assert.True(t, fs[0].Critical)
	assert.Equal(t, "GPU 1", fs[0].GPU)
	assert.Contains(t, fs[0].What, "Xid 79")
	assert.True(t, fs[1].Critical)
	assert.Equal(t, "GPU 0000:99:00", fs[1].GPU)
	assert.False(t, fs[2].Critical, "13 is in the default ignore_xids")
	assert.Contains(t, fs[2].What, "in ignore_xids")

	// The text comes from a host: nothing in it reaches a terminal raw.
	xs = ParseKernelXIDs([]byte("NVRM: Xid (PCI:0000:3b:00): 79, \x1b]0;owned\x07 fell off\u202e"+strings.Repeat("x", 300)), devs)
	require.Len(t, xs, 1)
	assert.True(t, strings.HasPrefix(xs[0].Text, "?]0;owned? fell off?x"), xs[0].Text)
	assert.LessOrEqual(t, len(xs[0].Text), xidTextMax+3)
}

// An Xid at a PCI address that is none of the host's GPUs (neither a
// device nor a lost one) is a warning: it cannot be a reason to fence
// the host's GPUs. With no device known it cannot be told, and stays
// critical.
func TestXIDAtOtherPCIIsWarning(t *testing.T) {
	devs := []Device{{Index: 0, PCIBusID: "00000000:18:00.0"}}
	x := func(pci string, gpu int) XID { return XID{GPU: gpu, PCI: pci, Code: 79, Key: pci} }
	for _, tc := range []struct {
		name string
		rep  HostReport
		crit bool
	}{
		{"a device", HostReport{Devices: devs, XIDs: []XID{x("0000:18:00", 0)}}, true},
		{"none of the host's", HostReport{Devices: devs, XIDs: []XID{x("0000:99:00", -1)}}, false},
		{"a lost GPU", HostReport{Devices: devs, LostGPUs: []string{"00000000:99:00.0"}, XIDs: []XID{x("0000:99:00", -1)}}, true},
		{"no device known", HostReport{XIDs: []XID{x("0000:99:00", -1)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var xidCrit []bool
			for _, f := range CheckHealth(tc.rep, HealthPolicy{}) {
				if strings.Contains(f.What, "Xid 79") {
					xidCrit = append(xidCrit, f.Critical)
				}
			}
			require.Len(t, xidCrit, 1)
			assert.Equal(t, tc.crit, xidCrit[0])
		})
	}
}
