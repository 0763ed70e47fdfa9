package e2e

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

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// fakeGPUs gives fleet host i two GPUs through a stand-in nvidia-smi (and
// dmesg) first on its login PATH: a directory bind-mounted over
// /usr/local/bin in the mount namespace of the host's logins only. The
// stand-in answers in the forms a real H200 under driver 580 printed
// (gpu/testdata/h200): "[N/A]" for page retirement, "No" for the remap
// states, a hex bitmask for the clock event reasons. The returned
// directory holds the host's state, which the test changes as root:
// ecc0/ecc1 (volatile uncorrectable ECC count per GPU) and kmsg (what
// dmesg prints). The test hosts have no NVML, so the agent falls back to
// nvidia-smi, and their login user may not read /dev/kmsg
// (kernel.dmesg_restrict), so it falls back to dmesg.
func fakeGPUs(t *testing.T, i int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drover-fake-gpus-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	smi := fmt.Sprintf(`#!/bin/sh
d=%q
ecc() { cat "$d/ecc$1" 2>/dev/null || echo 0; }
case "$1" in
--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,pci.bus_id,driver_version)
	echo "0, GPU-h%[2]d-0, NVIDIA H200, 143771, 0, 0, 00000000:18:00.0, 580.159.04"
	echo "1, GPU-h%[2]d-1, NVIDIA H200, 143771, 0, 0, 00000000:19:00.0, 580.159.04" ;;
--query-gpu=%[3]s)
	echo "0, $(ecc 0), 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16"
	echo "1, $(ecc 1), 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16" ;;
--query-gpu=index,mig.mode.current) printf '0, [N/A]\n1, [N/A]\n' ;;
--query-compute-apps=*) ;;
"") echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
*) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
`, dir, i, gpu.SMIHealthFields)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(smi), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dmesg"), []byte(fmt.Sprintf("#!/bin/sh\ncat %q/kmsg 2>/dev/null\n", dir)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kmsg"), []byte("<5>[    1.0] Linux version 6.8.0\n"), 0o644))
	_, err = fleet.ExecInLogins(i, "mount", "--bind", dir, "/usr/local/bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.ExecInLogins(i, "umount", "/usr/local/bin"); err != nil {
			t.Errorf("restore %s: %v", fleet.Hosts[i].Name, err)
		}
	})
	privateGPULeases(t, i)
	return dir
}

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
func writeGPUInventory(t *testing.T, j *fleetJob, spare int) {
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
func rankHosts(t *testing.T, j *fleetJob, attempt, ranks int) []string {
	t.Helper()
	var hosts []string
	for r := range ranks {
		m := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(j.logFile(t, attempt, fmt.Sprintf("worker-%d", r)))
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

// waitStderr waits until drover's events match re.
func (d *droverProc) waitStderr(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	testenv.Wait(t, within, "an event matching "+re.String(), func() (bool, string) {
		if m = re.FindStringSubmatch(d.stderr.String()); m != nil {
			return true, ""
		}
		select {
		case <-d.done:
			t.Fatalf("drover exited %d before an event matching %s\nstderr:\n%s", d.code, re, d.stderr.String())
		default:
		}
		return false, "\nstderr:\n" + d.stderr.String()
	})
	return m
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
		state[i] = fakeGPUs(t, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(state[1], "ecc1"), []byte("1\n"), 0o644))
	script := `echo "rank=$RANK world=$WORLD_SIZE host=$DROVER_HOST gpus=$CUDA_VISIBLE_DEVICES"`
	eccEvent := regexp.QuoteMeta(fleet.Hosts[1].Name + " GPU 1: 1 uncorrectable ECC error(s) since the driver loaded")

	t.Run("enforce", func(t *testing.T) {
		j := newFleetJob(t, jobSpec{Script: script})
		writeGPUInventory(t, j, 3)
		d := startDrover(t, j)
		require.Equal(t, 0, d.wait(t, 90*time.Second), d.stderr.String())
		stderr := d.stderr.String()
		assert.Regexp(t, eccEvent, stderr)
		assert.Contains(t, stderr, fleet.Hosts[1].Name+" kept out (GPU health: GPU 1 1 uncorrectable ECC error(s)")
		assert.Contains(t, stderr, "replaced by spare "+fleet.Hosts[3].Name)
		assert.Equal(t, hostNames(0, 2, 3), rankHosts(t, j, 1, 6))
		assert.Contains(t, j.logFile(t, 1, "worker-5"), "world=6 ")
	})

	t.Run("enforce without a spare", func(t *testing.T) {
		j := newFleetJob(t, jobSpec{Script: script})
		writeGPUInventory(t, j, -1)
		d := startDrover(t, j)
		require.Equal(t, 1, d.wait(t, 90*time.Second), d.stderr.String())
		stderr := d.stderr.String()
		assert.Regexp(t, eccEvent+` \(ecc.errors.uncorrected.volatile.total\) \(fix: reset the GPU \(nvidia-smi -r\) or reboot the host; if errors come back, replace the GPU\); `+
			`health = "enforce" keeps `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` out and no spare host is left`, stderr)
		assert.NotContains(t, stderr, "started", "nothing started")
	})

	t.Run("warn", func(t *testing.T) {
		j := newFleetJob(t, jobSpec{Script: script, Job: `health = "warn"`})
		writeGPUInventory(t, j, 3)
		d := startDrover(t, j)
		require.Equal(t, 0, d.wait(t, 90*time.Second), d.stderr.String())
		stderr := d.stderr.String()
		assert.Regexp(t, `warning: GPU health: `+eccEvent+`.*\(critical; health = "warn" lets it train\)`, stderr)
		assert.NotContains(t, stderr, "kept out")
		assert.Equal(t, hostNames(0, 1, 2), rankHosts(t, j, 1, 6))
	})

	t.Run("probe --health", func(t *testing.T) {
		j := newFleetJob(t, jobSpec{Script: script})
		writeGPUInventory(t, j, 3)
		// An Xid from before: listed, not judged (a run judges only new ones).
		require.NoError(t, os.WriteFile(filepath.Join(state[0], "kmsg"),
			[]byte("<4>[   50.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"+forgedXIDs("0000:18:00")), 0o644))
		d := startDroverArgs(t, j, "probe", j.Path, "--health")
		require.Equal(t, 0, d.wait(t, 60*time.Second), d.stderr.String())
		out := d.stdout.String()
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
		state[i] = fakeGPUs(t, i)
	}
	j := newFleetJob(t, jobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT host=$DROVER_HOST"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
`, Job: "max_restarts = 0\nmax_host_failures = 1"})
	writeGPUInventory(t, j, 3)
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0 `), 6, 90*time.Second)
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
	d.waitStderr(t, regexp.MustCompile(`warning: GPU health: `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` GPU 1: Xid 13 .*in ignore_xids`), 10*time.Second)
	assert.NotContains(t, d.stderr.String(), "stopping", "an ignored Xid does not stop the group")

	appendKmsg("<4>[  101.5] NVRM: Xid (PCI:0000:19:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
	d.waitStderr(t, regexp.MustCompile(`GPU health: `+regexp.QuoteMeta(fleet.Hosts[1].Name)+` GPU 1: Xid 79 .*; health = "enforce" keeps `+
		regexp.QuoteMeta(fleet.Hosts[1].Name)+` out: the group restarts without it, on spare `+regexp.QuoteMeta(fleet.Hosts[3].Name)+`; stopping \d+ process`), 10*time.Second)
	require.Equal(t, 0, d.wait(t, 90*time.Second), d.stderr.String())
	stderr := d.stderr.String()
	t.Logf("events:\n%s", stderr)
	assert.NotRegexp(t, `attempt 2/2: pushed .* on `+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\n`, stderr, "the restart does not set up the host kept out")
	assert.NotContains(t, stderr, "kept out (GPU health", "its spare was chosen at the stop: no setup to redo")
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded", "counted against max_host_failures: one attempt added")
	assert.Equal(t, hostNames(0, 2, 3), rankHosts(t, j, 2, 6))
	// Each host's health watch ran beside its first process (the report
	// drover read), and ended with it: nothing of the job is left.
	for _, i := range []int{0, 1, 2} {
		rep, err := hostFile(t, i, path.Join(j.Workdir, ".drover/logs/attempt-1/health.json"))
		require.NoError(t, err)
		assert.Contains(t, rep, `"source":"nvidia-smi"`, "host %d", i)
	}
	assert.Empty(t, jobProcs(t, j.Name), "every agent waits for its health watch to end")
}
