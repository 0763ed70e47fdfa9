package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/internal/fleettest"
)

// The checkpoint section (issue 15): what copying checkpoints costs
// training, and how long a lost host takes to replace. It has a fleet of
// its own, three hosts and a spare on subnet -subnet+3 (23 by default), one
// process per host, named after -fleet-prefix so that a second run on the
// machine does not collide with it.
const (
	ckptBudget = 4 * time.Minute
	ckptHosts  = 3
	ckptSize   = 100 << 20 // bytes per checkpoint
	ckptSteps  = 240
	ckptEvery  = 60 // steps between checkpoints: about every 3 s
	ckptWork   = 24 // sha256 rounds over 1 MiB per step: tens of ms
	// ckptIdleMS is the part of each step the process sleeps, as a GPU
	// job's host CPU waits for its GPU: three hosts on this machine's cores
	// then leave some CPU idle, as real GPU hosts do, and drover's copies,
	// which run at the lowest priority, take that rather than training's.
	ckptIdleMS  = 20
	ckptWorkdir = "bench-ckpt"
)

// ckptScript is the workload: a fixed amount of CPU work and a sleep per
// step (ckptIdleMS), timed together and printed, with rank 0 saving a 100 MB checkpoint (temp file, rename)
// every ckptEvery steps and keeping two. The save itself is not timed: it
// is the same with or without drover's copies. With "hold", rank 0 saves
// one checkpoint unless it resumes, and every rank then waits.
const ckptScript = `import hashlib, os, sys, time
mode, steps, every, size, work, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]) / 1000
rank = int(os.environ["RANK"])
ck = os.environ["DROVER_CHECKPOINT_DIR"]
os.makedirs(ck, exist_ok=True)
buf = os.urandom(1 << 20)
blob = os.urandom(size) if rank == 0 else None
def save(step):
    tmp = os.path.join(ck, ".ck-%06d.tmp" % step)
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, os.path.join(ck, "ck-%06d.bin" % step))
    for n in sorted(n for n in os.listdir(ck) if n.startswith("ck-"))[:-2]:
        os.remove(os.path.join(ck, n))
if mode == "hold":
    if blob is not None and not os.environ.get("DROVER_RESUME_FROM"):
        save(1)
    print("resume=" + os.environ.get("DROVER_RESUME_FROM", ""), flush=True)
    while True:
        time.sleep(60)
for s in range(1, steps + 1):
    t = time.perf_counter()
    h = hashlib.sha256()
    for _ in range(work):
        h.update(buf)
    time.sleep(idle)
    print("step %d %.6f" % (s, time.perf_counter() - t), flush=True)
    if blob is not None and s % every == 0:
        save(s)
`

var copiedEvent = regexp.MustCompile(`checkpoint ck-\d+\.bin \(#\d+, [^)]*\) copied from`)

// checkpoints runs the section on its own fleet.
func (b *bench) checkpoints(ctx context.Context) []Row {
	ctx, cancel := context.WithTimeout(ctx, ckptBudget)
	defer cancel()
	steps := Row{Section: "checkpoints", N: ckptHosts, What: fmt.Sprintf("training step, %d MB checkpoint every %d steps, copied (checkpoint_copies = 2)", ckptSize>>20, ckptEvery),
		Baseline: "checkpoint_copies = 1 (no copies)"}
	capped := Row{Section: "checkpoints", N: ckptHosts, What: fmt.Sprintf("training step, copied at checkpoint_copy_rate = %q", ckptRate),
		Baseline: "checkpoint_copies = 1 (no copies)"}
	lost := Row{Section: "checkpoints", N: ckptHosts, What: fmt.Sprintf("rank 0's host cut off -> every process running again (spare, host_wait 2s, %d MB staged)", ckptSize>>20)}
	opts := fleettest.Options{Name: b.fleetPrefix + "ck", N: ckptHosts + 1, Subnet: b.subnet + 3, TmpfsHomes: !b.diskHomes}
	b.progress("bringing up fleet %s (%d hosts + a spare, 10.231.%d.0/24)", opts.Name, ckptHosts, opts.Subnet)
	f, err := upFleet(opts)
	if err != nil {
		b.note("checkpoint fleet did not come up: %v", err)
		steps.Drover, steps.BaselineTime, lost.Drover = na("no fleet"), na("no fleet"), na("no fleet")
		capped.Drover, capped.BaselineTime = na("no fleet"), na("no fleet")
		return []Row{steps, capped, lost}
	}
	defer f.Close()
	code := filepath.Join(b.work, "ckpt-code")
	if err := os.MkdirAll(code, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(code, "ck.py"), []byte(ckptScript), 0o644)
	}
	if err != nil {
		b.note("checkpoint workload: %v", err)
		steps.Drover, steps.BaselineTime, lost.Drover = na("no workload"), na("no workload"), na("no workload")
		capped.Drover, capped.BaselineTime = na("no workload"), na("no workload")
		return []Row{steps, capped, lost}
	}
	// Each repetition runs every variant once, one after the other, so
	// that a change in the machine's load hits them alike.
	variants := []ckptVariant{{copies: 1}, {copies: 2}, {copies: 2, rate: ckptRate}}
	times := make([][]time.Duration, len(variants))
	for rep := 0; rep < 2 && ctx.Err() == nil; rep++ {
		for i, v := range variants {
			ds, err := b.stepTimes(ctx, f, code, v)
			if err != nil {
				b.note("step time with %s: %s", v, reason(err))
				continue
			}
			b.progress("  %s: median step %s over %d steps", v, medianOf(ds), len(ds))
			times[i] = append(times[i], ds...)
		}
	}
	for i, v := range variants {
		if len(times[i]) > 0 {
			b.note("checkpoints: step time with %s: %s", v, spread(times[i]))
		}
	}
	steps.Drover, steps.BaselineTime = medianOr(times[1]), medianOr(times[0])
	capped.Drover, capped.BaselineTime = medianOr(times[2]), medianOr(times[0])
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.note("checkpoints: load average %s after the step-time runs; the copy competes for the same cores as training here",
			strings.Join(strings.Fields(string(la))[:3], " "))
	}
	d, err := b.lostHost(ctx, f, code)
	if err != nil {
		b.note("lost host: %s", reason(err))
		lost.Drover = na("%s", reason(err))
	} else {
		lost.Drover = Measure{Value: d.Seconds(), Unit: Seconds, N: 1}
	}
	return []Row{steps, capped, lost}
}

// ckptRate is the capped variant's checkpoint_copy_rate: a 100 MB copy
// then takes about a second, within the time between two checkpoints.
const ckptRate = "100MB/s"

// ckptVariant is one way of running the workload for its step times.
type ckptVariant struct {
	copies int
	rate   string // checkpoint_copy_rate, "" for the default
}

func (v ckptVariant) String() string {
	if v.rate == "" {
		return fmt.Sprintf("checkpoint_copies = %d", v.copies)
	}
	return fmt.Sprintf("checkpoint_copies = %d, checkpoint_copy_rate = %q", v.copies, v.rate)
}

// slug names the variant's files.
func (v ckptVariant) slug() string {
	if v.rate == "" {
		return strconv.Itoa(v.copies)
	}
	return strconv.Itoa(v.copies) + "-capped"
}

// spread is the mean and 90th percentile of step times beside the
// median: a copy slows the steps that overlap it (about a third of them
// here), which the median can hide.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("median %.1f ms, mean %.1f ms, p90 %.1f ms over %d steps",
		ms(s[len(s)/2]), ms(sum/time.Duration(len(s))), ms(s[len(s)*9/10]), len(s))
}

func medianOr(ds []time.Duration) Measure {
	if len(ds) == 0 {
		return na("not measured")
	}
	return medianOf(ds)
}

// ckptJob writes the section's job file.
func ckptJob(path string, f *benchFleet, code, mode string, v ckptVariant) error {
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = \"ckpt-bench\"\nframework = \"pytorch\"\ncode = %q\nworkdir = %q\n", code, ckptWorkdir)
	fmt.Fprintf(&b, "command = [\"python3\", \"ck.py\", %q, \"%d\", \"%d\", \"%d\", \"%d\", \"%d\"]\n", mode, ckptSteps, ckptEvery, ckptSize, ckptWork, ckptIdleMS)
	fmt.Fprintf(&b, "procs_per_host = 1\ncheckpoint_copies = %d\nmax_restarts = 2\nrestart_backoff = \"0s\"\nstop_grace = \"2s\"\nhost_wait = \"2s\"\n", v.copies)
	if v.rate != "" {
		fmt.Fprintf(&b, "checkpoint_copy_rate = %q\n", v.rate)
	}
	fmt.Fprintf(&b, "\n[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", f.User, f.KeyFile, f.KnownHosts)
	for i, h := range f.Hosts {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\n", h.Name, h.Addr)
		if i == ckptHosts {
			b.WriteString("spare = true\n")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// stepTimes runs the workload to the end once and returns every rank's
// step times but the first few (start-up).
func (b *bench) stepTimes(ctx context.Context, f *benchFleet, code string, v ckptVariant) ([]time.Duration, error) {
	if err := f.removeEverywhere(ckptWorkdir); err != nil {
		return nil, err
	}
	job := filepath.Join(b.work, fmt.Sprintf("ckpt-steps-%s.toml", v.slug()))
	if err := ckptJob(job, f, code, "train", v); err != nil {
		return nil, err
	}
	logs := filepath.Join(b.work, fmt.Sprintf("ckpt-runs-%s", v.slug()))
	_ = os.RemoveAll(logs)
	st, err := command{Args: []string{b.drover, "run", "--quiet", "--log-dir", logs, job}, Timeout: 2 * time.Minute}.run(ctx)
	if err != nil {
		return nil, err
	}
	runs, _ := filepath.Glob(filepath.Join(logs, "ckpt-bench-*", "attempt-1", "worker-*.log"))
	var out []time.Duration
	for _, p := range runs {
		ds, err := readSteps(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no step times in %s (run took %s)", logs, st.Wall.Round(time.Millisecond))
	}
	if v.copies > 1 {
		// Copies run at the lowest priority: on a machine that training
		// (and whatever else runs here) keeps busy they wait, and a newer
		// checkpoint supersedes them. Say how many finished.
		events, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(runs[0])), "events.log"))
		n, sup := len(copiedEvent.FindAll(events, -1)), bytes.Count(events, []byte("superseded by a newer checkpoint"))
		b.progress("  %s: %d checkpoint(s) copied, %d copies superseded (%d saved)", v, n, sup, ckptSteps/ckptEvery)
		if n == 0 {
			b.note("checkpoints: with %s no copy finished during the run (%d superseded): the machine left the copies no idle CPU", v, sup)
		}
	}
	return out, nil
}

// readSteps parses "step N SECONDS" lines, skipping the first five.
func readSteps(path string) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var n int
		var s float64
		if _, err := fmt.Sscanf(sc.Text(), "step %d %g", &n, &s); err == nil && n > 5 {
			out = append(out, time.Duration(s*float64(time.Second)))
		}
	}
	return out, sc.Err()
}

// lostHost starts the hold workload, waits for rank 0's checkpoint to be
// copied, cuts rank 0's host off and times until a process runs again on
// each host of the new group.
func (b *bench) lostHost(ctx context.Context, f *benchFleet, code string) (time.Duration, error) {
	if err := f.removeEverywhere(ckptWorkdir); err != nil {
		return 0, err
	}
	job := filepath.Join(b.work, "ckpt-lost.toml")
	if err := ckptJob(job, f, code, "hold", ckptVariant{copies: 2}); err != nil {
		return 0, err
	}
	argv := []string{"python3", "ck.py", "hold", strconv.Itoa(ckptSteps), strconv.Itoa(ckptEvery), strconv.Itoa(ckptSize), strconv.Itoa(ckptWork), strconv.Itoa(ckptIdleMS)}
	scanner, err := newProcScanner(f, argv, argv)
	if err != nil {
		return 0, err
	}
	// A fresh log directory, so a fresh checkpoint record: an earlier
	// run's record (same -work) would make this run resume, or hold the
	// checkpoint it saves for one it already knows.
	logs := filepath.Join(b.work, "ckpt-runs-lost")
	if err := os.RemoveAll(logs); err != nil {
		return 0, err
	}
	events := &eventRecorder{}
	cmd := exec.Command(b.drover, "run", "--quiet", "--log-dir", logs, job)
	cmd.Stderr = events
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 3 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start drover run: %w", err)
	}
	defer func() {
		_ = f.Heal(0)
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		waitGone(scanner, 10*time.Second)
	}()
	running := func(exclude map[procKey]bool) (map[procKey]bool, error) {
		ps, err := scanner.scan()
		if err != nil {
			return nil, err
		}
		hosts, keys := map[int]bool{}, map[procKey]bool{}
		for _, p := range ps {
			if p.Alive && !exclude[p.Key] {
				hosts[p.Host] = true
				keys[p.Key] = true
			}
		}
		if len(hosts) < ckptHosts || (exclude != nil && hosts[0]) {
			return nil, nil
		}
		return keys, nil
	}
	var first map[procKey]bool
	for first == nil {
		if _, ok := events.find(copiedEvent, start); ok {
			if first, err = running(nil); err != nil {
				return 0, err
			}
		}
		if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
			return 0, fmt.Errorf("no copied checkpoint and %d running processes within 2m: %s", ckptHosts, events.tail(3))
		}
		time.Sleep(pollEvery)
	}
	t0 := time.Now()
	if err := f.Cut(0); err != nil {
		return 0, err
	}
	for {
		again, err := running(first)
		if err != nil {
			return 0, err
		}
		if again != nil {
			d := time.Since(t0)
			b.progress("  %s cut off: every process running again after %s", f.Hosts[0].Name, d.Round(time.Millisecond))
			return d, nil
		}
		if ctx.Err() != nil || time.Since(t0) > 2*time.Minute {
			return 0, fmt.Errorf("processes not running again within 2m of the cut: %s", events.tail(3))
		}
		time.Sleep(pollEvery)
	}
}
