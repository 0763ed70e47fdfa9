package watch

// Fleet test of the straggler watch (issue 40 item 3): a rank that burns
// its peers' CPU many times over per step, and a rank whose GPU the
// stand-in nvidia-smi reports thermally throttled, are each named.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// stragglerScript steps every half second of the wall clock, in
// lockstep on every rank, and burns CPU before each step: 10 ms, and 12
// times that on rank 2.
const stragglerScript = `import os, time
burn = 0.12 if os.environ["RANK"] == "2" else 0.01
i = 0
while True:
    i += 1
    t = time.process_time()
    while time.process_time() - t < burn:
        pass
    with open(os.environ["DROVER_PROGRESS_FILE"], "w") as f:
        f.write("step=%d\n" % i)
    print("line %d" % i, flush=True)
    time.sleep(0.5 - time.time() % 0.5)
`

// clockSMI gives fleet host i two GPUs through a stand-in nvidia-smi on
// its login PATH (as topSMI does): each process whose pidfile names
// worker-N holds GPU N%2, and every GPU runs its SM clock at 1980 MHz
// but GPU throttled (-1: none), which runs at 1100 MHz in hardware
// thermal slowdown (0x40).
func clockSMI(t *testing.T, i int, workdir string, throttled int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "drover-clock-smi-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	clock := func(g int) string {
		if g == throttled {
			return "1100, 1980"
		}
		return "1980, 1980"
	}
	throttle := func(g int) string {
		if g == throttled {
			return "0x0000000000000040"
		}
		return "0x0000000000000000"
	}
	smi := fmt.Sprintf(`#!/bin/sh
case "$1" in
--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total)
	echo "0, GPU-h%[1]d-0, 97, 70123, 143771, 60, 600.0, %[3]s, 0"
	echo "1, GPU-h%[1]d-1, 97, 70123, 143771, 60, 600.0, %[4]s, 0" ;;
--query-gpu=index,clocks.sm,clocks.max.sm)
	echo "0, %[5]s"
	echo "1, %[6]s" ;;
--query-compute-apps=gpu_uuid,pid)
	for f in "$HOME"/%[2]s/.drover/pids/worker-*.pid; do
		[ -f "$f" ] || continue
		n=${f##*worker-}; n=${n%%.pid}
		sed -n "s/.*\"child_pid\": *\([0-9]*\).*/GPU-h%[1]d-$((n %% 2)), \1/p" "$f"
	done ;;
*) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
`, i, workdir, throttle(0), throttle(1), clock(0), clock(1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(smi), 0o755))
	_, err = fleet.ExecInLogins(i, "mount", "--bind", dir, "/usr/local/bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.ExecInLogins(i, "umount", "/usr/local/bin"); err != nil {
			t.Errorf("restore %s: %v", fleet.Hosts[i].Name, err)
		}
	})
}

// In a detached job of 3 hosts x 2 ranks stepping together, rank 2
// spends 12x its peers' CPU per step and rank 5's GPU runs at 1100 MHz
// against 1980 in thermal slowdown: within 60 s of the start, an event
// (its on_event notification) names each, and no other rank, and drover
// status shows both.
func TestRunNamesStragglers(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	fleettest.Need(t, fleet)
	testenv.LookPath(t, "python3")
	j := kit.NewFleetJob(t, kit.JobSpec{Command: `["python3", "w.py"]`, Hosts: 3, Job: `procs_per_host = 2
on_event = ["./on-event.sh"]`})
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "w.py"), []byte(stragglerScript), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "on-event.sh"), []byte("#!/bin/sh\ncat >> events.jsonl\n"), 0o755))
	for i := range 3 {
		throttled := -1
		if i == 2 {
			throttled = 1 // rank 5: worker-5 holds GPU 1 of host 2
		}
		clockSMI(t, i, j.Workdir, throttled)
	}
	kit.StartDetachedRun(t, j)

	file := filepath.Join(j.Dir, "events.jsonl")
	named := map[float64]string{}
	testenv.Wait(t, 60*time.Second, "straggler events naming ranks 2 and 5", func() (bool, string) {
		for _, e := range kit.ReadEvents(t, file) {
			if e["event"] == "straggler" {
				named[e["rank"].(float64)] = e["message"].(string)
			}
		}
		return len(named) >= 2, fmt.Sprintf("named %v", named)
	})
	h1, h2 := fleet.Hosts[1].Name, fleet.Hosts[2].Name
	assert.Regexp(t, `^straggler: rank 2 \(worker-2@`+h1+`\) spends 1\dx its peers' CPU per step \(0\.1\d\ds against 0\.01\ds\)$`, named[2])
	assert.Equal(t, "straggler: rank 5 (worker-5@"+h2+") runs GPU 1 at an SM clock of 1100 MHz against its peers' 1980 MHz (hardware thermal slowdown)", named[5])
	assert.Len(t, named, 2, "no other rank is named: %v", named)
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "status", j.Path)
	require.Equal(t, 0, code, "drover status: %s", errs)
	assert.True(t, strings.Contains(out, named[2]+"\n") && strings.Contains(out, named[5]+"\n"), "drover status shows both:\n%s", out)
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, "drover stop: %s", errs)
}

// replaceScript is stragglerScript's job, burning 12x in rank 1 while it
// runs on the fleet host its %[1]q names (not on a spare), and in rank 2
// once resumed, and saving a checkpoint, step-N holding N padded to 2.4
// MB, from rank 0 every 20 steps (10 s); rank 0 prints each step. The
// first attempt never ends; one resumed ends once the test writes a file
// named finish into the workdir.
const replaceScript = `import os, time
host, rank = os.environ["DROVER_HOST"], os.environ["RANK"]
ck, resume = os.environ["DROVER_CHECKPOINT_DIR"], os.environ.get("DROVER_RESUME_FROM", "")
start = int(open(resume).read()) if resume else 0
slow = (host == %[1]q and rank == "1") or (resume and rank == "2")
burn = 0.12 if slow else 0.01
print("start rank=%%s host=%%s from=%%d" %% (rank, host, start), flush=True)
i = start
while not (resume and os.path.exists("finish")):
    i += 1
    t = time.process_time()
    while time.process_time() - t < burn:
        pass
    with open(os.environ["DROVER_PROGRESS_FILE"], "w") as f:
        f.write("step=%%d\n" %% i)
    if rank == "0":
        print("step=%%d" %% i, flush=True)
    if rank == "0" and i %% 20 == 0:
        os.makedirs(ck, exist_ok=True)
        tmp = os.path.join(ck, ".step-%%d.tmp" %% i)
        with open(tmp, "w") as f:
            f.write(str(i).ljust(2400000))
        os.rename(tmp, os.path.join(ck, "step-%%d" %% i))
    time.sleep(0.5 - time.time() %% 0.5)
print("done rank=%%s step=%%d" %% (rank, i), flush=True)
`

// Issue 40 item 3, on_straggler = "replace": in 2 hosts x 2 ranks with a
// spare, rank 1 burns 12x its peers' CPU per step on the first host,
// where rank 0 writes the checkpoints. drover names rank 1, waits for the
// group's next checkpoint and for its copy on the other host (drover's
// copy, held to checkpoint_copy_rate, takes some 6 s: more than the 3 s
// a stopping watch lets a copy finish), and restarts the group from it
// with the spare in that host's place: the event names the replacement,
// the spare runs ranks 0 and 1 from that checkpoint, staged from the
// copy, the straggler's host runs nothing of attempt 2, and the run
// succeeds with max_restarts = 0 and max_host_failures = 0 (a
// replacement costs no restart). In attempt 2 rank 2 straggles too: no
// spare is free any more, so it is only named, and the event says so
// once. The restarted notification says what was done (a replacement,
// not a failure).
func TestRunReplacesStraggler(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	fleettest.Need(t, fleet)
	testenv.LookPath(t, "python3")
	slow, h1, spare := fleet.Hosts[0].Name, fleet.Hosts[1].Name, fleet.Hosts[2].Name
	j := kit.NewFleetJob(t, kit.JobSpec{Command: `["python3", "w.py"]`, Job: `procs_per_host = 2
on_straggler = "replace"
checkpoint_copy_rate = "400kB/s"
on_event = ["./on-event.sh"]
max_restarts = 0
max_host_failures = 0`})
	hosts := fleet.ClusterHosts()[:3]
	hosts[2].Spare = true
	kit.WriteInventory(t, j.Inventory, hosts)
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "w.py"), []byte(fmt.Sprintf(replaceScript, slow)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "on-event.sh"), []byte("#!/bin/sh\ncat >> events.jsonl\n"), 0o755))

	d := kit.StartDrover(t, j)
	m := d.WaitStderr(t, regexp.MustCompile(`attempt 1/1: replacing `+regexp.QuoteMeta(slow)+
		` \(rank 1 straggles: spends 1\dx its peers' CPU per step \(0\.1\d\ds against 0\.01\ds\)\) with spare `+regexp.QuoteMeta(spare)+
		` at checkpoint step-(\d+); stopping 4 process`), 120*time.Second) // naming, a checkpoint, its copy: a copy at the lowest priority on busy hosts may be superseded twice first
	// Attempt 2: rank 2 is named, with no spare left; the run goes on
	// for some 3 s more (three of the replacement's rounds: it says so
	// only once) and is then told to finish.
	d.WaitStderr(t, regexp.MustCompile(`attempt 2/2: on_straggler = "replace": no spare host is free to replace `+regexp.QuoteMeta(h1)), 90*time.Second)
	stepRE := regexp.MustCompile(`(?m)^\[worker-0@\S+\] step=(\d+)$`)
	lastStep := func() int {
		ms := stepRE.FindAllStringSubmatch(d.Stdout.String(), -1)
		require.NotEmpty(t, ms)
		n, err := strconv.Atoi(ms[len(ms)-1][1])
		require.NoError(t, err)
		return n
	}
	seen := lastStep()
	testenv.WaitFor(t, 30*time.Second, "rank 0 to take 6 more steps", func() bool { return lastStep() >= seen+6 })
	for _, i := range []int{1, 2} {
		finish := path.Join(kit.HostHome, j.Workdir, "finish")
		_, err := fleet.Exec(i, "touch", finish)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = fleet.Exec(i, "rm", "-f", finish) })
	}
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	stderr := d.Stderr.String()
	t.Logf("events:\n%s", stderr)
	assert.Regexp(t, `attempt 1/1: straggler: rank 1 \(worker-1@`+regexp.QuoteMeta(slow)+`\) spends`, stderr, "named first")
	assert.Contains(t, stderr, `attempt 1/1: on_straggler = "replace": checkpoint step-`+m[1]+` is held only on `+slow+
		` so far; the replacement waits for drover's copy of it on another host`, "the checkpoint's writer straggles")
	assert.Regexp(t, `attempt 2/2: resuming from checkpoint step-`+m[1]+` \(#\d+, seen [^)]*\): .*; staged .* from `+regexp.QuoteMeta(h1)+`:\S*/\.drover/checkpoints/`,
		stderr, "the spare gets drover's copy on the host kept")
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded", "the replacement costs no restart: one attempt added")
	assert.NotRegexp(t, `attempt 2/2: straggler: rank [^2] `, stderr, "the spare keeps up")
	assert.Regexp(t, `attempt 2/2: straggler: rank 2 \(worker-2@`+regexp.QuoteMeta(h1)+`\) spends`, stderr)
	assert.Equal(t, 1, strings.Count(stderr, `attempt 2/2: on_straggler = "replace": no spare host is free to replace `+h1+`; rank 2 is only named (add a host with spare = true)`),
		"said once")
	assert.NotContains(t, stderr, "attempt 2/2: replacing")
	assert.NotRegexp(t, `attempt 2/2: pushed .* on `+regexp.QuoteMeta(slow)+`\n`, stderr, "the restart does not set up the straggler's host")
	want := []string{h1, h1, spare, spare}
	sort.Strings(want)
	assert.Equal(t, want, rankHosts(t, j, 2, 4), "the spare in the straggler's host's place")
	for r := range 4 {
		log := j.LogFile(t, 2, fmt.Sprintf("worker-%d", r))
		assert.Contains(t, log, " from="+m[1]+"\n", "rank %d resumes from the checkpoint the event named", r)
		assert.Contains(t, log, "done rank=", "rank %d finished", r)
	}
	assert.Empty(t, kit.JobProcs(t, j.Name))
	var restarted []map[string]any
	for _, e := range kit.ReadEvents(t, filepath.Join(j.Dir, "events.jsonl")) {
		if e["event"] == "restarted" {
			restarted = append(restarted, e)
		}
	}
	require.Len(t, restarted, 1, "one restart")
	e := restarted[0]
	assert.Equal(t, "replaced straggler host "+slow+" with spare "+spare+" at checkpoint step-"+m[1]+"; attempt 2 starts in 0s", e["message"])
	assert.Regexp(t, `^straggler replaced \(on_straggler = "replace"\), not a failure: straggler: rank 1 \(worker-1@`+regexp.QuoteMeta(slow)+`\) spends`, e["root_cause"])
	assert.Equal(t, "step-"+m[1], e["checkpoint"])
	assert.Equal(t, slow, e["host"])
}
