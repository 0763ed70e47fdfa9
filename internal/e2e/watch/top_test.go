package watch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/top"
)

// topSMI gives fleet host i two GPUs through a stand-in nvidia-smi (and
// an empty dmesg) first on its login PATH: a directory bind-mounted over
// /usr/local/bin in the mount namespace of the host's logins only, as
// kit.FakeGPUs does. It answers drover top's query in the forms
// a real H200 printed (gpu/testdata/h200): GPU 1 is thermally throttled
// (0x40) with one uncorrectable ECC error, and every process that
// workdir's pidfiles name holds GPU 0. It answers the probe's and the
// health watch's queries too (the same ECC error), so that a job can run
// on those GPUs.
func topSMI(t *testing.T, i int, workdir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "drover-top-smi-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	smi := fmt.Sprintf(`#!/bin/sh
case "$1" in
--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total)
	echo "0, GPU-h%[1]d-0, 87, 70123, 143771, 40, 127.31, 0x0000000000000000, 0"
	echo "1, GPU-h%[1]d-1, [N/A], 1, 143771, 91, 650.02, 0x0000000000000040, 1" ;;
--query-compute-apps=gpu_uuid,pid)
	for f in "$HOME"/%[2]s/.drover/pids/*.pid; do
		[ -f "$f" ] && sed -n 's/.*"child_pid": *\([0-9]*\).*/GPU-h%[1]d-0, \1/p' "$f"
	done ;;
--query-compute-apps=*) ;;
--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,pci.bus_id,driver_version)
	echo "0, GPU-h%[1]d-0, NVIDIA H200, 143771, 0, 0, 00000000:18:00.0, 580.159.04"
	echo "1, GPU-h%[1]d-1, NVIDIA H200, 143771, 0, 0, 00000000:19:00.0, 580.159.04" ;;
--query-gpu=%[3]s)
	echo "0, 0, 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16"
	echo "1, 1, 0, [N/A], No, No, 0x0000000000000040, 5, 5, 16, 16" ;;
--query-gpu=index,mig.mode.current) printf '0, [N/A]\n1, [N/A]\n' ;;
"") echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
*) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
`, i, workdir, gpu.SMIHealthFields)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(smi), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dmesg"), []byte("#!/bin/sh\n"), 0o755))
	_, err = fleet.ExecInLogins(i, "mount", "--bind", dir, "/usr/local/bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.ExecInLogins(i, "umount", "/usr/local/bin"); err != nil {
			t.Errorf("restore %s: %v", fleet.Hosts[i].Name, err)
		}
	})
	kit.PrivateGPULeases(t, i)
}

// stepScript writes step=N to DROVER_PROGRESS_FILE and a line of output
// five times a second, for ever.
const stepScript = `
i=0
while true; do
	i=$((i+1))
	echo "step=$i" > "$DROVER_PROGRESS_FILE"
	echo "line $i"
	sleep 0.2
done
`

// startStepJob starts a job that reports its steps on every fleet host,
// hosts 0 and 1 with the stand-in GPUs, and waits until every rank runs.
func startStepJob(t *testing.T) *kit.FleetJob {
	t.Helper()
	j := kit.NewFleetJob(t, kit.JobSpec{Script: stepScript})
	topSMI(t, 0, j.Workdir)
	topSMI(t, 1, j.Workdir)
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@[^]]*\] line 3$`), 4, 60*time.Second)
	return j
}

// `drover top --once --json` shows every host, each GPU's numbers and
// flags with the process that uses it, and each process's state, output
// age and step; a host without nvidia-smi says why it shows no GPUs.
func TestTopOnceJSON(t *testing.T) {
	fleettest.Need(t, fleet)
	j := startStepJob(t)
	// The progress file follows the output lines by a moment: ask again
	// until every process has reported a step (the bound is the 21 tries
	// half a second apart this was, each of a `drover top` of about half
	// a second).
	var v top.View
	testenv.Wait(t, 20*time.Second, "every process to report a step", func() (bool, string) {
		v = top.View{}
		require.NoError(t, json.Unmarshal(kit.RunTop(t, j, "--once", "--json"), &v))
		return everyProcStepped(v), fmt.Sprintf("%+v", v)
	})
	assert.Equal(t, j.Name, v.Job)
	require.Len(t, v.Hosts, 4)
	for i, h := range v.Hosts {
		assert.Equal(t, fleet.Hosts[i].Name, h.Host)
		assert.True(t, h.Reachable, "%s: %s", h.Host, h.Error)
		require.Len(t, h.Procs, 1, h.Host)
		p := h.Procs[0]
		assert.Equal(t, fmt.Sprintf("worker-%d", i), p.Name)
		// A live worker: it may be caught writing its log ("disk-wait"
		// on a busy disk, seen in 2 of 2 runs under a load of 11), never
		// stopped or a zombie.
		assert.Contains(t, []string{"running", "sleeping", "disk-wait"}, p.State)
		assert.Less(t, p.OutputAgeS, 10.0, "it prints five lines a second")
		assert.GreaterOrEqual(t, p.OutputAgeS, 0.0, "-1 is no log found")
		require.NotNil(t, p.Step, h.Host)
		assert.Positive(t, *p.Step)
		// --once waits a second sample for the rate (five steps a second).
		require.NotNil(t, p.StepRate, h.Host)
		assert.Positive(t, *p.StepRate)
		if i >= 2 {
			assert.Empty(t, h.GPUs)
			assert.Contains(t, h.GPUError, "nvidia-smi")
			continue
		}
		require.Len(t, h.GPUs, 2, h.Host)
		g0, g1 := h.GPUs[0], h.GPUs[1]
		assert.Equal(t, 87.0, *g0.UtilPct)
		assert.Equal(t, 127.31, *g0.PowerW)
		assert.Equal(t, []int{0}, p.GPUs, "the rank's group holds GPU 0")
		assert.Nil(t, g1.UtilPct, "[N/A] is no number")
		assert.Equal(t, 91.0, *g1.TempC)
		assert.Equal(t, uint64(0x40), *g1.Throttle)
		assert.Equal(t, 1.0, *g1.ECCVolatile)
	}
	table := string(kit.RunTop(t, j, "--once"))
	t.Logf("drover top --once:\n%s", table)
	assert.Regexp(t, regexp.QuoteMeta(fleet.Hosts[0].Name)+` +1 +\? +0\.0/140G +91C +650W +hw-thermal,ecc-uncorrected=1 +-`, table)
	assert.Regexp(t, `(?m)^worker-0 +`+regexp.QuoteMeta(fleet.Hosts[0].Name)+` +\d+ +(running|sleeping|disk-wait) +\ds ago +\d+ +\d+\.\d\d$`, table)

	// Without a terminal (stdout a pipe), top prints what --once prints
	// at each refresh until it is stopped.
	cmd := exec.Command(kit.DroverBinary(t), "top", "--every", "300ms", j.Path)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(j.Dir, "home"))
	var out transporttest.SyncBuffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	testenv.WaitFor(t, 30*time.Second, "drover top to print three views", func() bool {
		return strings.Count(out.String(), "drover top: "+j.Name) >= 3
	})
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	views := strings.Split(out.String(), "drover top: "+j.Name+" ")
	assert.Empty(t, views[0], "the output starts with a view")
	for _, v := range views[1:] {
		assert.Contains(t, v, "worker-3", "each view whole")
	}
}

// While a job runs on GPUs, top shows what the run's health watch found
// (its report in the workdir) with the GPU: here GPU 1's uncorrectable
// ECC error, a critical finding that health = "warn" lets train.
func TestTopShowsHealthWatch(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: stepScript, Hosts: 1, Job: `health = "warn"`})
	topSMI(t, 0, j.Workdir)
	h0 := fleet.ClusterHosts()[0]
	inv := fmt.Sprintf("[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n\n[[host]]\nname = %q\naddress = %q\ngpus = \"auto\"\n",
		fleet.User, fleet.KeyFile, fleet.KnownHosts, h0.Name, h0.Address)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(inv), 0o644))
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@[^]]*\] line 3$`), 2, 60*time.Second)
	var v top.View
	testenv.Wait(t, 30*time.Second, "a health finding on GPU 1", func() (bool, string) {
		v = top.View{}
		require.NoError(t, json.Unmarshal(kit.RunTop(t, j, "--once", "--json", "--hosts", fleet.Hosts[0].Name), &v))
		require.Len(t, v.Hosts, 1)
		gs := v.Hosts[0].GPUs
		return len(gs) == 2 && len(gs[1].Health) > 0, fmt.Sprintf("%+v", v.Hosts[0])
	})
	gs := v.Hosts[0].GPUs
	assert.Empty(t, gs[0].Health)
	assert.True(t, gs[1].Health[0].Critical)
	assert.Contains(t, gs[1].Health[0].What, "1 uncorrectable ECC error(s)")
}

// An inventory on its own (no job) is watched too: GPUs, no processes.
func TestTopOnceInventory(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "true"})
	topSMI(t, 0, j.Workdir)
	j.Path = j.Inventory
	var v top.View
	require.NoError(t, json.Unmarshal(kit.RunTop(t, j, "--once", "--json"), &v))
	require.Len(t, v.Hosts, 4)
	for _, h := range v.Hosts {
		assert.True(t, h.Reachable, "%s: %s", h.Host, h.Error)
		assert.Empty(t, h.Procs)
	}
	assert.Len(t, v.Hosts[0].GPUs, 2)
	assert.Equal(t, "no nvidia-smi on this host's PATH (no NVIDIA driver)", v.Hosts[1].GPUError)
}

// metricsAddr waits for drover top to say where it serves its metrics.
func metricsAddr(t *testing.T, d *kit.DroverProc) string {
	t.Helper()
	re := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	var m []string
	testenv.Wait(t, 30*time.Second, "drover top to say where its metrics are", func() (bool, string) {
		m = re.FindStringSubmatch(d.Stderr.String())
		return m != nil, "\n" + d.Stderr.String()
	})
	return m[1]
}

// scrape reads the metrics with Prometheus's own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "%s", body)
	return fams
}

// value is the metric of fams named name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// waitMetric polls the metrics until name{want} satisfies ok, failing
// after within.
func waitMetric(t *testing.T, url, name string, want map[string]string, ok func(float64) bool, within time.Duration) {
	t.Helper()
	testenv.Wait(t, within, fmt.Sprintf("%s%v", name, want), func() (bool, string) {
		v, found := value(scrape(t, url), name, want)
		return found && ok(v), fmt.Sprintf("have %v (found %v)", v, found)
	})
}

// The Prometheus endpoint has the labelled series (job, host, rank, GPU),
// the step rate once two steps were seen, and a cut host goes down
// within 8 s.
func TestTopMetricsAndCutHost(t *testing.T) {
	fleettest.Need(t, fleet)
	j := startStepJob(t)
	d := kit.StartDroverArgs(t, j, "top", "--metrics-addr", "127.0.0.1:0", j.Path)
	url := metricsAddr(t, d)
	h0, h3 := fleet.Hosts[0].Name, fleet.Hosts[3].Name
	for _, h := range fleet.Hosts {
		waitMetric(t, url, "drover_host_up", map[string]string{"job": j.Name, "host": h.Name}, func(v float64) bool { return v == 1 }, 30*time.Second)
	}
	gpu0 := map[string]string{"job": j.Name, "host": h0, "gpu": "0", "rank": "0"}
	waitMetric(t, url, "drover_gpu_utilization_percent", gpu0, func(v float64) bool { return v == 87 }, 10*time.Second)
	fams := scrape(t, url)
	for name, want := range map[string]float64{
		"drover_gpu_memory_used_bytes":   70123 * (1 << 20),
		"drover_gpu_temperature_celsius": 40,
		"drover_gpu_power_watts":         127.31,
	} {
		v, ok := value(fams, name, gpu0)
		assert.True(t, ok, name)
		assert.Equal(t, want, v, name)
	}
	gpu1 := map[string]string{"job": j.Name, "host": h0, "gpu": "1", "rank": ""}
	v, _ := value(fams, "drover_gpu_throttle_reasons", gpu1)
	assert.Equal(t, float64(0x40), v)
	_, ok := value(fams, "drover_gpu_utilization_percent", gpu1)
	assert.False(t, ok, "a value the GPU did not report is no series")
	rank3 := map[string]string{"job": j.Name, "host": h3, "rank": "3", "process": "worker-3"}
	waitMetric(t, url, "drover_process_steps_per_second", rank3, func(v float64) bool { return v > 0 }, 15*time.Second)
	waitMetric(t, url, "drover_process_step", rank3, func(v float64) bool { return v > 0 }, time.Second)

	require.NotEmpty(t, topSamplers(t, 3), "drover agent top samples host 3 before the cut")
	require.NoError(t, fleet.Cut(3))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(3)) })
	waitMetric(t, url, "drover_host_up", map[string]string{"job": j.Name, "host": h3}, func(v float64) bool { return v == 0 }, 8*time.Second)
	// The others stay up (polled: on a loaded machine one sample may come
	// late for a moment).
	waitMetric(t, url, "drover_host_up", map[string]string{"job": j.Name, "host": h0}, func(v float64) bool { return v == 1 }, 10*time.Second)
	// The cut host's sampler hears no heartbeat and stops: nothing is
	// left sampling there for as long as its sshd does not notice.
	testenv.Wait(t, 30*time.Second, "drover agent top to stop on the cut host", func() (bool, string) {
		left := topSamplers(t, 3)
		return len(left) == 0, fmt.Sprintf("%v", left)
	})
}

// topSamplers are the `drover agent top` processes on fleet host i.
func topSamplers(t *testing.T, i int) []string {
	t.Helper()
	pids, err := fleet.Pids(i)
	require.NoError(t, err)
	var out []string
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), "agent\x00top\x00") {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

// The interactive view, in a real terminal (tmux), shows the table and
// quits on q.
func TestTopInteractiveQuitsOnQ(t *testing.T) {
	fleettest.Need(t, fleet)
	tmux := testenv.LookPath(t, "tmux")
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "true"})
	topSMI(t, 0, j.Workdir)
	session := "drover-top-" + j.Name
	sock := filepath.Join(j.Dir, "tmux.sock")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	line := fmt.Sprintf("HOME=%q %q top %q; echo top-exited-$?; sleep 60", filepath.Join(j.Dir, "home"), kit.DroverBinary(t), j.Path)
	_, err := tm("new-session", "-d", "-s", session, "-x", "160", "-y", "40", line)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tm("kill-server") })
	screen := func(re *regexp.Regexp) string {
		var out string
		testenv.Wait(t, 30*time.Second, "the screen to match "+re.String(), func() (bool, string) {
			var err error
			out, err = tm("capture-pane", "-p", "-t", session)
			require.NoError(t, err, out)
			return re.MatchString(out), "\n" + out
		})
		return out
	}
	out := screen(regexp.MustCompile(`(?s)HOST +GPU +UTIL.*` + regexp.QuoteMeta(fleet.Hosts[0].Name) + ` +1 +\? .*hw-thermal,ecc-uncorrected=1`))
	assert.Contains(t, out, "drover top: "+j.Name)
	assert.Contains(t, out, "q quits")
	_, err = tm("send-keys", "-t", session, "q")
	require.NoError(t, err)
	screen(regexp.MustCompile(`top-exited-0`))
}

// everyProcStepped reports whether every process top shows has a step.
func everyProcStepped(v top.View) bool {
	for _, h := range v.Hosts {
		for _, p := range h.Procs {
			if p.Step == nil {
				return false
			}
		}
	}
	return len(v.Hosts) > 0
}
