package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
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
	// it is left, and its record says stopped.
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
}
