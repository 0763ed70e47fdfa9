package watch

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// forgedXIDs are kernel-log lines (as `dmesg -r` prints them) that a
// local user can make appear naming the GPU at pci: a program whose file
// name reads like an Xid that segfaults (the kernel's own record, which
// starts with the name cut to 15 characters and quotes the whole file
// name after "in"), and a record written to /dev/kmsg (facility user).
func forgedXIDs(pci string) string {
	return "<6>[   60.0] NVRM: Xid (PCI:[4321]: segfault at 0 ip 0000000000401000 sp 00007ffc12345678 error 4 in NVRM: Xid (PCI:" + pci +
		"): 79, pid=1, GPU has fallen off the bus.[401000+1000] likely on CPU 0 (core 0, socket 0)\n" +
		"<12>[   61.0] NVRM: Xid (PCI:" + pci + "): 79, pid=1, GPU has fallen off the bus.\n"
}

// writeGPUInventory writes the fleet as an inventory with gpus = "auto",
// host spare (if >= 0) marked spare.
func writeGPUInventory(t *testing.T, j *kit.FleetJob, spare int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for i, h := range fleet.ClusterHosts() {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = \"auto\"\n", h.Name, h.Address)
		if i == spare {
			b.WriteString("spare = true\n")
		}
	}
	require.NoError(t, os.WriteFile(j.Inventory, []byte(b.String()), 0o644))
}

// rankHosts reads which host each rank of attempt ran on ("host=NAME" in
// its log), sorted.
func rankHosts(t *testing.T, j *kit.FleetJob, attempt, ranks int) []string {
	t.Helper()
	var hosts []string
	for r := range ranks {
		m := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(j.LogFile(t, attempt, fmt.Sprintf("worker-%d", r)))
		require.NotNil(t, m, "rank %d of attempt %d", r, attempt)
		hosts = append(hosts, m[1])
	}
	sort.Strings(hosts)
	return hosts
}

func hostNames(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fleet.Hosts[i].Name, fleet.Hosts[i].Name) // two GPUs, two ranks
	}
	sort.Strings(out)
	return out
}

// Issue 28: four hosts of two GPUs each, the fourth a spare; the second
// host's GPU 1 reports an uncorrectable ECC error. By default (health =
// "enforce") the spare takes its place before anything starts: 6 ranks on
// hosts 1, 3 and 4, an event naming host 2 and the error. health = "warn"
// trains on hosts 1-3 with a warning. `drover probe --health` shows the
// count.
func TestHealthGateECC(t *testing.T) {
	fleettest.Need(t, fleet)
	var state [4]string
	for i := range 4 {
		state[i] = kit.FakeGPUs(t, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(state[1], "ecc1"), []byte("1\n"), 0o644))
	script := `echo "rank=$RANK world=$WORLD_SIZE host=$DROVER_HOST gpus=$CUDA_VISIBLE_DEVICES"`
	eccEvent := regexp.QuoteMeta(fleet.Hosts[1].Name + " GPU 1: 1 uncorrectable ECC error(s) since the driver loaded")

	t.Run("enforce", func(t *testing.T) {
		j := kit.NewFleetJob(t, kit.JobSpec{Script: script})
		writeGPUInventory(t, j, 3)
		d := kit.StartDrover(t, j)
		require.Equal(t, 0, d.Wait(t, 90*time.Second), d.Stderr.String())
		stderr := d.Stderr.String()
		assert.Regexp(t, eccEvent, stderr)
		assert.Contains(t, stderr, fleet.Hosts[1].Name+" kept out (GPU health: GPU 1 1 uncorrectable ECC error(s)")
		assert.Contains(t, stderr, "replaced by spare "+fleet.Hosts[3].Name)
		assert.Equal(t, hostNames(0, 2, 3), rankHosts(t, j, 1, 6))
		assert.Contains(t, j.LogFile(t, 1, "worker-5"), "world=6 ")
	})

	t.Run("enforce without a spare", func(t *testing.T) {
		j := kit.NewFleetJob(t, kit.JobSpec{Script: script})
		writeGPUInventory(t, j, -1)
		d := kit.StartDrover(t, j)
		require.Equal(t, 1, d.Wait(t, 90*time.Second), d.Stderr.String())
		stderr := d.Stderr.String()
		assert.Regexp(t, eccEvent+` \(ecc.errors.uncorrected.volatile.total\) \(fix: reset the GPU \(nvidia-smi -r\) or reboot the host; if errors come back, replace the GPU\); `+
			`health = "enforce" keeps `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` out and no spare host is left`, stderr)
		assert.NotContains(t, stderr, "started", "nothing started")
	})

	t.Run("warn", func(t *testing.T) {
		j := kit.NewFleetJob(t, kit.JobSpec{Script: script, Job: `health = "warn"`})
		writeGPUInventory(t, j, 3)
		d := kit.StartDrover(t, j)
		require.Equal(t, 0, d.Wait(t, 90*time.Second), d.Stderr.String())
		stderr := d.Stderr.String()
		assert.Regexp(t, `warning: GPU health: `+eccEvent+`.*\(critical; health = "warn" lets it train\)`, stderr)
		assert.NotContains(t, stderr, "kept out")
		assert.Equal(t, hostNames(0, 1, 2), rankHosts(t, j, 1, 6))
	})

	t.Run("probe --health", func(t *testing.T) {
		j := kit.NewFleetJob(t, kit.JobSpec{Script: script})
		writeGPUInventory(t, j, 3)
		// An Xid from before: listed, not judged (a run judges only new ones).
		require.NoError(t, os.WriteFile(filepath.Join(state[0], "kmsg"),
			[]byte("<4>[   50.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"+forgedXIDs("0000:18:00")), 0o644))
		d := kit.StartDroverArgs(t, j, "probe", j.Path, "--health")
		require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
		out := d.Stdout.String()
		t.Logf("probe --health:\n%s", out)
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\s+1\s+1\s+0\s+-\s+no\s+no\s+0x0\s+gen 5/5 x16/16\s*$`, out, "h2's GPU 1: ECC count 1")
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\s+0\s+0\s+0\s`, out)
		assert.Contains(t, out, "critical: "+fleet.Hosts[1].Name+" GPU 1: 1 uncorrectable ECC error(s)")
		assert.Contains(t, out, fleet.Hosts[0].Name+": 1 Xid(s) (kernel log (dmesg))\n  Xid 79 on GPU 0: pid=1, GPU has fallen off the bus.\n")
		assert.NotContains(t, out, "critical: "+fleet.Hosts[0].Name)
		assert.Contains(t, out, fleet.Hosts[2].Name+": 0 Xid(s) (kernel log (dmesg))")
	})
}

// Issue 28: an Xid 79 (the GPU fell off the bus) appearing in a host's
// kernel log while the group runs stops the group within 10 s, and the
// next attempt runs without that host (its spare in its place); an Xid in
// ignore_xids before it only warns.
func TestHealthXIDDuringRun(t *testing.T) {
	fleettest.Need(t, fleet)
	var state [4]string
	for i := range 4 {
		state[i] = kit.FakeGPUs(t, i)
	}
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT host=$DROVER_HOST"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
`, Job: "max_restarts = 0\nmax_host_failures = 1"})
	writeGPUInventory(t, j, 3)
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0 `), 6, 90*time.Second)
	appendKmsg := func(line string) {
		f, err := os.OpenFile(filepath.Join(state[1], "kmsg"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString(line + "\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	// What a local user can make the kernel log (forgedXIDs) is no Xid:
	// before the fix it stopped the group here.
	appendKmsg(strings.TrimSuffix(forgedXIDs("0000:19:00"), "\n"))
	appendKmsg("<4>[  100.5] NVRM: Xid (PCI:0000:19:00): 13, pid=4242, name=python3, Graphics Exception")
	d.WaitStderr(t, regexp.MustCompile(`warning: GPU health: `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` GPU 1: Xid 13 .*in ignore_xids`), 10*time.Second)
	assert.NotContains(t, d.Stderr.String(), "stopping", "an ignored Xid does not stop the group")

	appendKmsg("<4>[  101.5] NVRM: Xid (PCI:0000:19:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
	d.WaitStderr(t, regexp.MustCompile(`GPU health: `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` GPU 1: Xid 79 .*; health = "enforce" keeps `+
		regexp.QuoteMeta(fleet.Hosts[1].Name)+` out: the group restarts without it, on spare `+regexp.QuoteMeta(fleet.Hosts[3].Name)+`; stopping \d+ process`), 10*time.Second)
	require.Equal(t, 0, d.Wait(t, 90*time.Second), d.Stderr.String())
	stderr := d.Stderr.String()
	t.Logf("events:\n%s", stderr)
	assert.NotRegexp(t, `attempt 2/2: pushed .* on `+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\n`, stderr, "the restart does not set up the host kept out")
	assert.NotContains(t, stderr, "kept out (GPU health", "its spare was chosen at the stop: no setup to redo")
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded", "counted against max_host_failures: one attempt added")
	assert.Equal(t, hostNames(0, 2, 3), rankHosts(t, j, 2, 6))
	// Each host's health watch ran beside its first process (the report
	// drover read), and ended with it: nothing of the job is left.
	for _, i := range []int{0, 1, 2} {
		rep, err := kit.HostFile(t, i, path.Join(j.Workdir, ".drover/logs/attempt-1/health.json"))
		require.NoError(t, err)
		assert.Contains(t, rep, `"source":"nvidia-smi"`, "host %d", i)
	}
	assert.Empty(t, kit.JobProcs(t, j.Name), "every agent waits for its health watch to end")
}
