package sharing

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/sweep"
)

// sweepTrainer is a stand-in trainer: `step=N loss=X` a tenth of a second
// apart, loss = k/N (k = 1 for lr 0.001, 2 for lr 0.01) plus seed/1000
// from step 10 on, over 20 steps; lr 1.0 diverges (a constant 5, for 300
// steps, so that only an early stop ends it within the test's bound).
// Each trial appends what it ran on, its arguments and when to
// <workdir>/trials.log on its host ($1 $2 are the command's {lr} {seed}),
// once: a stop may signal it twice (itself and its process group).
const sweepTrainer = `
rec=../../trials.log
start=$(date +%s.%N)
done_() { echo "$DROVER_HOST $CUDA_VISIBLE_DEVICES $DROVER_TRIAL_ID $1 $2 $DROVER_PARAM_LR $DROVER_SWEEP_ID $start $(date +%s.%N) $3" >> "$rec"; }
trap 'trap "" TERM; done_ "$1" "$2" stopped; exit 143' TERM
n=20
[ "$DROVER_PARAM_LR" = 1.0 ] && n=300
i=1
while [ $i -le $n ]; do
	awk -v lr="$DROVER_PARAM_LR" -v s="$DROVER_PARAM_SEED" -v i=$i 'BEGIN {
		if (lr == 1) l = 5; else { l = (lr == 0.001 ? 1 : 2) / i; if (i >= 10) l += s / 1000 }
		printf "step=%d loss=%.6f\n", i, l }'
	sleep 0.1
	i=$((i+1))
done
done_ "$1" "$2" completed
`

// A sweep of 12 trials (lr x seed, one GPU each) on 3 hosts x 2 stand-in
// GPUs runs every trial, never two on one GPU at once, uses all 6 GPUs;
// the median rule stops every diverging trial (lr 1.0) and none of the
// best lr's; --json's best is lr 0.001 seed 0.
func TestSweepGrid(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("a fleet test")
	}
	j := kit.NewFleetJob(t, kit.JobSpec{Script: sweepTrainer, Hosts: 3, Command: `["sh", "w.sh", "{lr}", "{seed}"]`, Job: `health = "off"`})
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.ReplaceAll(string(inv), "gpus = []", `gpus = "auto"`)), 0o644))
	for i := range 3 {
		kit.FakeGPUs(t, i)
	}
	d := kit.StartDroverArgs(t, j, "sweep", j.Path, "--log-dir", j.LogRoot, "--param", "lr=0.001,0.01,1.0", "--param", "seed=0..3",
		"--early-stop", "median", "--json")
	t.Cleanup(func() {
		for i := range 12 {
			kit.KillJob(t, fmt.Sprintf("%s-t%02d", j.Name, i))
		}
	})
	require.Equal(t, 0, d.Wait(t, 5*time.Minute), "stderr:\n%s", d.Stderr.String())
	var rep sweep.Report
	require.NoError(t, json.Unmarshal([]byte(d.Stdout.String()), &rep), d.Stdout.String())
	require.Len(t, rep.Trials, 12)
	for _, r := range rep.Trials {
		switch r.Params["lr"] {
		case "1.0":
			assert.Equal(t, sweep.Stopped, r.State, "%s %v", r.ID, r.Params)
		case "0.001":
			assert.Equal(t, sweep.Completed, r.State, "%s %v", r.ID, r.Params)
			assert.Equal(t, 20, r.Steps, r.ID)
		}
	}
	require.NotNil(t, rep.Best)
	assert.Equal(t, map[string]string{"lr": "0.001", "seed": "0"}, rep.Best.Params)

	// The code went to each host once, and each trial's own push, into
	// its directory seeded from it, sent nothing.
	assert.Equal(t, 3, strings.Count(d.Stderr.String(), "drover: sweep: code pushed to "), d.Stderr.String())
	logs, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-t*", "events.log"))
	require.NoError(t, err)
	require.Len(t, logs, 12)
	for _, l := range logs {
		b, err := os.ReadFile(l)
		require.NoError(t, err)
		assert.NotRegexp(t, `pushed [1-9]`, string(b), l)
	}

	// The trials' own records: 12, each with the GPU the report says and
	// its parameters substituted, none two on one GPU at once, all 6 used.
	type span struct {
		id         string
		start, end float64
	}
	byGPU := map[string][]span{}
	for i := range 3 {
		out, err := kit.HostFile(t, i, path.Join(j.Workdir, "trials.log"))
		require.NoError(t, err)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			require.Len(t, f, 10, l)
			t.Log(l)
			r := trialByID(t, rep, f[2])
			assert.Equal(t, fleet.Hosts[i].Name, r.Host, l)
			assert.Equal(t, []int{kit.Atoi(f[1])}, r.GPUs, l)
			assert.Equal(t, []string{r.Params["lr"], r.Params["seed"], r.Params["lr"]}, f[3:6], l)
			assert.True(t, strings.HasPrefix(f[6], j.Name+"-"), "DROVER_SWEEP_ID %s", f[6])
			s := span{id: f[2], start: atof(t, f[7]), end: atof(t, f[8])}
			byGPU[f[0]+":"+f[1]] = append(byGPU[f[0]+":"+f[1]], s)
		}
	}
	n := 0
	for g, spans := range byGPU {
		slices.SortFunc(spans, func(a, b span) int { return int((a.start - b.start) * 1e9) })
		for k := 1; k < len(spans); k++ {
			assert.LessOrEqual(t, spans[k-1].end, spans[k].start, "%s: trials %s and %s overlap", g, spans[k-1].id, spans[k].id)
		}
		n += len(spans)
	}
	assert.Equal(t, 12, n, "every trial recorded itself once")
	assert.Len(t, byGPU, 6, "every GPU used: %v", byGPU)
}

func trialByID(t *testing.T, rep sweep.Report, id string) sweep.Result {
	t.Helper()
	for _, r := range rep.Trials {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no trial %s in the report", id)
	return sweep.Result{}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return v
}

// A sweep whose trial needs both GPUs of a host, one of which another
// run leases, waits for that run instead of failing: the trial does not
// start while the lease is held, and runs, on both GPUs, once it is
// given back (the sweep looks at the leases again). One trial keeps it
// short; TestSweepGrid has many.
func TestSweepWaitsForAnotherRunsLease(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("a fleet test")
	}
	kit.FakeGPUs(t, 0)
	kit.PrivateGPULeases(t, 0)
	rel, err := os.MkdirTemp("", "drover-sweep-release-") // the hosts' user must see it
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(rel) })
	require.NoError(t, os.Chmod(rel, 0o755))
	release := filepath.Join(rel, "release")
	holder := gpuJob(t, "sweephold", release, "gpus_per_host = 1")
	inv, err := os.ReadFile(holder.Inventory)
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(inv), "\n[[host]]\n"+`name = "`+fleet.Hosts[1].Name)
	require.NoError(t, os.WriteFile(holder.Inventory, []byte(first), 0o644), "host 0 alone")
	h := kit.StartDrover(t, holder)
	h.WaitLines(t, startLine, 1, 90*time.Second)

	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Command: `["sh", "w.sh", "{x}"]`, Job: `health = "off"`,
		Script: "echo \"$DROVER_TRIAL_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)\" >> ../../trials.log\necho loss=$1\n"})
	inv, err = os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.ReplaceAll(string(inv), "gpus = []", `gpus = "auto"`)), 0o644))
	d := kit.StartDroverArgs(t, j, "sweep", j.Path, "--log-dir", j.LogRoot, "--param", "x=1", "--gpus-per-trial", "2", "--json")
	t.Cleanup(func() { kit.KillJob(t, j.Name+"-t0") })
	d.WaitStderr(t, regexp.MustCompile(`t0 waits for GPUs that other runs lease`), 90*time.Second)
	_, err = kit.HostFile(t, 0, path.Join(j.Workdir, "trials.log"))
	require.Error(t, err, "no trial started while the lease is held")
	released := float64(time.Now().UnixNano()) / 1e9
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	require.Equal(t, 0, h.Wait(t, time.Minute), h.Stderr.String())

	require.Equal(t, 0, d.Wait(t, 2*time.Minute), "stderr:\n%s", d.Stderr.String())
	var rep sweep.Report
	require.NoError(t, json.Unmarshal([]byte(d.Stdout.String()), &rep), d.Stdout.String())
	require.Len(t, rep.Trials, 1)
	assert.Equal(t, sweep.Completed, rep.Trials[0].State)
	assert.Equal(t, []int{0, 1}, rep.Trials[0].GPUs)
	out, err := kit.HostFile(t, 0, path.Join(j.Workdir, "trials.log"))
	require.NoError(t, err)
	ids := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 3, l)
		ids[f[0]]++
		assert.Equal(t, "0,1", f[1], l)
		assert.Greater(t, atof(t, f[2]), released, "%s started after the other run gave GPU 0 back", l)
	}
	assert.Equal(t, map[string]int{"t0": 2}, ids, "the trial's two processes (one per GPU) ran once")
}

// --hosts-per-trial 2: each trial's run is a group of two hosts, one
// GPU of each; the two trials run side by side on the two hosts' two
// GPUs, and the code goes to each host once for both.
func TestSweepTrialsOfTwoHosts(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("a fleet test")
	}
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["sh", "w.sh", "{x}"]`, Job: `health = "off"`,
		Script: "echo \"$DROVER_TRIAL_ID $DROVER_HOST $CUDA_VISIBLE_DEVICES\" >> ../../trials.log\necho loss=$1\n"})
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.ReplaceAll(string(inv), "gpus = []", `gpus = "auto"`)), 0o644))
	for i := range 2 {
		kit.FakeGPUs(t, i)
	}
	d := kit.StartDroverArgs(t, j, "sweep", j.Path, "--log-dir", j.LogRoot, "--param", "x=1,2", "--hosts-per-trial", "2", "--json")
	t.Cleanup(func() {
		kit.KillJob(t, j.Name+"-t0")
		kit.KillJob(t, j.Name+"-t1")
	})
	require.Equal(t, 0, d.Wait(t, 2*time.Minute), "stderr:\n%s", d.Stderr.String())
	var rep sweep.Report
	require.NoError(t, json.Unmarshal([]byte(d.Stdout.String()), &rep), d.Stdout.String())
	require.Len(t, rep.Trials, 2)
	h0, h1 := fleet.Hosts[0].Name, fleet.Hosts[1].Name
	for _, r := range rep.Trials {
		assert.Equal(t, sweep.Completed, r.State, r.ID)
		require.Len(t, r.Hosts, 2, r.ID)
		assert.ElementsMatch(t, []string{h0, h1}, []string{r.Hosts[0].Host, r.Hosts[1].Host}, r.ID)
	}
	ran := map[string]bool{}
	for i := range 2 {
		out, err := kit.HostFile(t, i, path.Join(j.Workdir, "trials.log"))
		require.NoError(t, err)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			require.Len(t, f, 3, l)
			ran[f[0]+"@"+f[1]] = true
		}
	}
	assert.Equal(t, map[string]bool{"t0@" + h0: true, "t0@" + h1: true, "t1@" + h0: true, "t1@" + h1: true}, ran, "each trial ran on both hosts")
	assert.Equal(t, 2, strings.Count(d.Stderr.String(), "drover: sweep: code pushed to "), d.Stderr.String())
}

// A trial whose host is lost (cut off the network while it runs) is not
// failed: the host is left out and the trial starts over on the other
// host, within the job's max_host_failures.
func TestSweepMovesTrialOffLostHost(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("a fleet test")
	}
	h0, h1 := fleet.Hosts[0].Name, fleet.Hosts[1].Name
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["sh", "w.sh", "{x}"]`, Job: "health = \"off\"\nmax_host_failures = 1",
		Script: fmt.Sprintf("echo \"$DROVER_TRIAL_ID $DROVER_HOST\" >> ../../trials.log\n"+
			"if [ \"$DROVER_HOST\" = %q ]; then while :; do sleep 0.1; done; fi\necho loss=$1\n", h0)})
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.ReplaceAll(string(inv), "gpus = []", `gpus = "auto"`)), 0o644))
	for i := range 2 {
		kit.FakeGPUs(t, i)
	}
	d := kit.StartDroverArgs(t, j, "sweep", j.Path, "--log-dir", j.LogRoot, "--param", "x=1", "--gpus-per-trial", "2", "--json")
	t.Cleanup(func() { kit.KillJob(t, j.Name+"-t0") })
	testenv.WaitFor(t, 90*time.Second, "the trial running on "+h0, func() bool {
		out, err := kit.HostFile(t, 0, path.Join(j.Workdir, "trials.log"))
		return err == nil && strings.Contains(out, "t0 "+h0)
	})
	require.NoError(t, fleet.Cut(0))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(0)) })

	require.Equal(t, 0, d.Wait(t, 3*time.Minute), "stderr:\n%s", d.Stderr.String())
	var rep sweep.Report
	require.NoError(t, json.Unmarshal([]byte(d.Stdout.String()), &rep), d.Stdout.String())
	require.Len(t, rep.Trials, 1)
	assert.Equal(t, sweep.Completed, rep.Trials[0].State)
	assert.Equal(t, h1, rep.Trials[0].Host)
	assert.Contains(t, d.Stderr.String(), "t0 gives "+h0+":0,1 back", d.Stderr.String())
	// Said in the sweep's terms: the job's max_host_failures, not the
	// trial's run's own (0: the sweep moves the trial itself).
	assert.Contains(t, d.Stderr.String(), h0+" is left out of the sweep, and the trial moves to another host (moves left after this one: 0 of the job's max_host_failures = 1)")
	assert.NotContains(t, d.Stderr.String(), "max_host_failures = 0", d.Stderr.String())
}

// resumeTrainer is a stand-in trial that records each start in
// <workdir>/starts.log on its host, then prints `step=N loss=X` 30 times
// 0.2 s apart (trial x=1: 3 times, so that one completes early).
const resumeTrainer = `
echo "$DROVER_TRIAL_ID $DROVER_SWEEP_ID" >> ../../starts.log
n=30
[ "$1" = 1 ] && n=3
[ "$1" -ge 6 ] && n=300
i=1
while [ $i -le $n ]; do
	echo "step=$i loss=$(awk -v x="$1" -v i=$i 'BEGIN { printf "%.4f", x / i }')"
	sleep 0.2
	i=$((i+1))
done
`

// startDetachedSweep runs `drover sweep -d` in a session of its own and
// returns the background supervisor's pid (killed at cleanup).
func startDetachedSweep(t *testing.T, j *kit.FleetJob, args ...string) (sup int, stderr string) {
	t.Helper()
	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, append([]string{"sweep", "-d", j.Path, "--log-dir", j.LogRoot}, args...)...)
	require.Equal(t, 0, d.Wait(t, 90*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Regexp(t, `sweep \S+ started in the background`, d.Stdout.String())
	m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String())
	require.NotNil(t, m, d.Stdout.String())
	sup, _ = strconv.Atoi(m[1])
	testenv.SignalAtCleanup(t, sup, syscall.SIGKILL, false)
	_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
	return sup, d.Stderr.String()
}

// sweepStatus is `drover sweep status JOB --json`, from a directory of its own.
func sweepStatus(t *testing.T, j *kit.FleetJob) sweep.Report {
	t.Helper()
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "sweep", "status", j.Path, "--json")
	require.Equal(t, 0, code, "drover sweep status: %s", errs)
	var rep sweep.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	return rep
}

func countState(rep sweep.Report, s sweep.State) int {
	n := 0
	for _, r := range rep.Trials {
		if r.State == s {
			n++
		}
	}
	return n
}

// Done-when (issue 39, item 4): a detached sweep survives its supervisor
// being SIGKILLed; running the same command again finishes it without
// running again any trial that had started; `drover sweep status`, `logs`
// and `stop` work from another directory.
func TestSweepDetachedResume(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("a fleet test")
	}
	j := kit.NewFleetJob(t, kit.JobSpec{Script: resumeTrainer, Hosts: 2, Command: `["sh", "w.sh", "{x}"]`, Job: `health = "off"`})
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.ReplaceAll(string(inv), "gpus = []", `gpus = "auto"`)), 0o644))
	for i := range 2 {
		kit.FakeGPUs(t, i)
	}
	t.Cleanup(func() {
		for i := range 5 {
			kit.KillJob(t, fmt.Sprintf("%s-t%d", j.Name, i))
		}
	})
	args := []string{"--param", "x=1..5", "--max-parallel", "2"}
	sup, _ := startDetachedSweep(t, j, args...)
	testenv.Wait(t, 90*time.Second, "a trial to complete", func() (bool, string) {
		rep := sweepStatus(t, j)
		return countState(rep, sweep.Completed) >= 1, fmt.Sprintf("%+v", rep.Trials)
	})
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	before := sweepStatus(t, j)
	t.Logf("at the kill: %+v", before.Trials)
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "sweep", "status", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "gone: run the same drover sweep command again")

	_, resumed := startDetachedSweep(t, j, args...)
	assert.Contains(t, resumed, "resuming sweep")
	var rep sweep.Report
	testenv.Wait(t, 3*time.Minute, "the resumed sweep to complete every trial", func() (bool, string) {
		rep = sweepStatus(t, j)
		return countState(rep, sweep.Completed) == 5, fmt.Sprintf("%+v", rep.Trials)
	})
	require.NotNil(t, rep.Best)
	assert.Equal(t, "t1", rep.Best.ID, "x=2 over 30 steps reaches the lowest loss, 2/30")

	// Every trial started once: those that completed or ran at the kill
	// were kept or adopted, not run again.
	starts := map[string]int{}
	for i := range 2 {
		out, err := kit.HostFile(t, i, path.Join(j.Workdir, "starts.log"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			starts[strings.Fields(l)[0]]++
		}
	}
	assert.Equal(t, map[string]int{"t0": 1, "t1": 1, "t2": 1, "t3": 1, "t4": 1}, starts)

	out, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "sweep", "logs", j.Path, "--trial", "t1")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "step=30 loss=0.0667", "t1's last line")

	// Another sweep of the job, stopped while its trials run: nothing of
	// it is left, and its record says the sweep and its trials stopped.
	startDetachedSweep(t, j, "--param", "x=6..7")
	testenv.Wait(t, 90*time.Second, "the second sweep's trials to run", func() (bool, string) {
		rep := sweepStatus(t, j)
		return countState(rep, sweep.Running) == 2 && len(rep.Trials) == 2, fmt.Sprintf("%+v", rep.Trials)
	})
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 3*time.Minute, "sweep", "stop", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "stopped: no trial of sweep")
	for i := range 2 {
		assert.Empty(t, kit.JobProcs(t, fmt.Sprintf("%s-t%d", j.Name, i)), "trial t%d left running", i)
	}
	out, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "sweep", "status", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Regexp(t, `sweep \S+: stopped`, out)
	for _, r := range sweepStatus(t, j).Trials {
		assert.Equal(t, sweep.Interrupted, r.State, "%s: a trial the stop ended is stopped, not failed", r.ID)
		assert.NotNil(t, r.Ended, r.ID)
	}
}
