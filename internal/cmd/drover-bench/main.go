// Command drover-bench measures drover against the OpenSSH tools it
// replaces, side by side in one run on a real test fleet (one sshd per
// network namespace, scripts/testfleet): fan-out of a trivial command
// (drover exec vs pdsh and an ssh loop), code push (drover push vs one
// rsync per host), failure handling of drover run (outside SIGKILL to
// every other process stopped, and to the next attempt running),
// drover's own memory and CPU while supervising, and checkpoints (training
// step time with and without drover's checkpoint copies, and a lost host to
// every process running again on the spare), and copies and staging
// (checkpoints and [[data]] sets) from a controller behind a slow link.
//
// Every drover figure comes from running the bin/drover binary as a
// subprocess, so process start is included as it is for pdsh. A drover
// command that is missing or fails makes its row "n/a (reason)"; nothing
// the harness starts can hang it (every subprocess has a timeout, the
// sections a deadline, and the transfer section, run after them whatever
// time they left, a budget of its own). It is run by `make bench` (scripts/bench), needs
// root for the fleet, prints a table and writes docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == transferChildArg {
		os.Exit(transferChild(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// bench holds one run's settings and what it has found so far.
type bench struct {
	drover    string
	work      string
	tree      string
	treeFiles int
	treeBytes int64
	reps      int
	pushReps  int
	kills     int
	steady    time.Duration
	start     time.Time
	stderr    io.Writer
	notes     []string
	pushRSS   []Row
	// scaleN is the scale section's number of light hosts.
	scaleN int
	// rtt is the latency section's round-trip time; latencyN its fleet.
	rtt         time.Duration
	latencyN    int
	sections    map[string]bool
	fleetPrefix string
	subnet      int
	// diskHomes keeps the hosts' homes on this machine's filesystem
	// rather than a tmpfs (fleettest.Options.TmpfsHomes).
	diskHomes bool
	// transferMax is the largest checkpoint the transfer section moves;
	// transferRelay adds the copy through the controller as a baseline.
	transferMax   int64
	transferRelay bool
	// transferLink is every host's own link rate for a second round of
	// staging (entries up to transferLinkMax bytes); "" skips it.
	transferLink    string
	transferLinkMax int64
	// transferKinds are the transfer section's kinds of case to run
	// (copy, stage, data).
	transferKinds map[string]bool
	// topN is the top section's fleet, topWindow how long the
	// interactive view's CPU is measured.
	topN      int
	topWindow time.Duration
	// statusN is the status section's fleet.
	statusN int
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.stderr, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// note records something the reader of the results must know; it is also
// shown as progress.
func (b *bench) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	b.notes = append(b.notes, n)
	b.progress("note: %s", n)
}

// Section budgets: each section gets at most this long (and never past the
// run's deadline); what it measured by then is kept.
const (
	fleetReserve = 45 * time.Second // bring a fleet up and tear it down
	fanoutBudget = 100 * time.Second
	pushBudget   = 150 * time.Second
	failBudget   = 150 * time.Second
	latBudget    = 120 * time.Second
	scaleBudget  = 120 * time.Second
)

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("drover-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	droverBin := fs.String("drover", "bin/drover", "the drover binary to measure")
	sizes := fs.String("sizes", "8,16,32", "fleet sizes for the fan-out benchmark (at most 3: subnets 20..22)")
	pushSizes := fs.String("push-sizes", "8,16,32", "fleet sizes (among -sizes) for the push benchmark")
	failN := fs.Int("failure-n", 16, "fleet size (among -sizes) for failure handling and memory; 0 skips it")
	reps := fs.Int("reps", 5, "repetitions of the fast measurements")
	pushReps := fs.Int("push-reps", 3, "repetitions of the first push")
	kills := fs.Int("kills", 5, "outside SIGKILLs during the failure benchmark (one per attempt)")
	steady := fs.Duration("steady", 10*time.Second, "window for drover run's steady CPU use")
	deadline := fs.Duration("deadline", 12*time.Minute, fmt.Sprintf("every section but transfer must end within this (transfer then has a budget of its own, %s)", transferBudget))
	work := fs.String("work", filepath.Join(os.TempDir(), "drover-bench"), "scratch directory (job files, the pushed tree)")
	doc := fs.String("doc", "docs/benchmarks.md", `markdown results file to write ("" for none)`)
	cmdline := fs.String("command", "make bench", "the command to name in the results file")
	scaleN := fs.Int("scale-n", 256, "light hosts (one SSH server in this process) for the scale section; 0 skips it")
	quick := fs.Bool("quick", false, "skip the scale section (N=256)")
	rtt := fs.Duration("rtt", 50*time.Millisecond, "round-trip time the latency section puts between drover and the hosts")
	latencyN := fs.Int("latency-n", 8, "fleet size (among -sizes) for the latency section; 0 skips it")
	sections := fs.String("sections", "fanout,push,failure,latency,scale,top,status", "sections to run (fanout, push, failure, latency, scale, top, status)")
	statusN := fs.Int("status-n", 16, "fleet size (among -sizes) for drover status; 0 skips it")
	topN := fs.Int("top-n", 16, "fleet size (among -sizes) for drover top; 0 skips it")
	topWindow := fs.Duration("top-window", time.Minute, "how long the interactive drover top's CPU is measured")
	prefix := fs.String("fleet-prefix", "b", "fleets are named PREFIX<N> (another prefix lets a second run share the machine)")
	subnet := fs.Int("subnet", 20, "first subnet X of 10.231.X.0/24; fleets use X, X+1, X+2 and the checkpoint fleet X+3")
	diskHomes := fs.Bool("disk-homes", false, "keep the hosts' homes on this machine's filesystem instead of a tmpfs")
	ckpt := fs.Bool("checkpoints", true, "measure checkpoint copying and a lost host on a fleet of its own (PREFIXck, subnet -subnet+3)")
	transfer := fs.Bool("transfer", true, "measure checkpoint copies and staging from a controller 50 Mbit/s away (fleet PREFIXtx, subnet -subnet+4)")
	transferMax := fs.Int64("transfer-max", 2<<30, "largest checkpoint the transfer section moves, in bytes (200 MiB and 2 GiB are measured)")
	transferRelay := fs.Bool("transfer-relay", true, "also copy 200 MiB through the controller, the baseline (about 70 s at 50 Mbit/s)")
	transferLink := fs.String("transfer-link", transferLink, `stage again with every host's link at this rate (tc's syntax; "" skips it)`)
	transferKinds := fs.String("transfer-kinds", "copy,stage,data", "the transfer section's cases: copy (checkpoint copies), stage (checkpoint staging), data (drover stage of a [[data]] set of 1,000 files onto 1, 2, 4 and 8 hosts with -transfer-link)")
	transferLinkMax := fs.Int64("transfer-link-max", 200<<20, "largest checkpoint staged with -transfer-link, in bytes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ns, err1 := parseSizes(*sizes)
	ps, err2 := parseSizes(*pushSizes)
	if err := errors.Join(err1, err2); err != nil || len(ns) > 3 || *reps < 1 || *pushReps < 1 || *kills < 1 {
		fmt.Fprintf(stderr, "drover-bench: bad flags: %v (at most 3 sizes, repetitions >= 1)\n", err)
		return 2
	}
	abs, err := filepath.Abs(*droverBin)
	if err != nil {
		fmt.Fprintf(stderr, "drover-bench: %v\n", err)
		return 2
	}
	loadStart := loadAvg()
	b := &bench{drover: abs, work: *work, tree: filepath.Join(*work, "tree"), reps: *reps, pushReps: *pushReps,
		kills: *kills, steady: *steady, start: time.Now(), stderr: stderr, diskHomes: *diskHomes,
		rtt: *rtt, latencyN: *latencyN, scaleN: *scaleN, sections: map[string]bool{}, fleetPrefix: *prefix, subnet: *subnet,
		transferMax: *transferMax, transferRelay: *transferRelay, transferLink: *transferLink, transferLinkMax: *transferLinkMax,
		topN: *topN, topWindow: *topWindow, statusN: *statusN, transferKinds: map[string]bool{}}
	for _, k := range strings.Split(*transferKinds, ",") {
		b.transferKinds[strings.TrimSpace(k)] = true
	}
	for _, s := range strings.Split(*sections, ",") {
		b.sections[strings.TrimSpace(s)] = true
	}
	if *quick || b.scaleN <= 0 {
		delete(b.sections, "scale")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sigCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, *deadline)
	defer cancel()

	if err := os.MkdirAll(b.work, 0o755); err != nil {
		fmt.Fprintf(stderr, "drover-bench: %v\n", err)
		return 1
	}
	if _, err := os.Stat(b.drover); err != nil {
		b.note("drover binary %s not found: every drover row is n/a (run `make build`)", *droverBin)
	}
	if len(intersect(ns, ps)) > 0 {
		n, err := generateTree(b.tree, defaultTree)
		if err != nil {
			fmt.Fprintf(stderr, "drover-bench: %v\n", err)
			return 1
		}
		b.treeFiles, b.treeBytes = defaultTree.Files(), n
		b.progress("generated %s: %d files, %.1f MB (seed %d)", b.tree, b.treeFiles, float64(n)/1e6, defaultTree.Seed)
	}

	var rows []Row
	fleetsUp := 0
	// Scale first: it is short, and needs no OpenSSH fleet, so a slow
	// machine that runs out of time loses a fleet size rather than it.
	if b.sections["scale"] {
		sctx, cancel := context.WithTimeout(ctx, scaleBudget)
		rows = append(rows, b.scale(sctx)...)
		cancel()
		fleetsUp++
	}
	for i, n := range ns {
		doPush := slices.Contains(ps, n) && b.sections["push"]
		doFail := n == *failN && b.sections["failure"]
		if !b.sections["fanout"] && !doPush && !doFail && !(n == *latencyN && b.rtt > 0 && b.sections["latency"]) && !b.topSection(n) && !b.statusSection(n) {
			continue // no section uses this fleet (e.g. -sections "" -checkpoints)
		}
		need := fleetReserve + fanoutBudget/2
		if remaining(ctx) < need {
			b.note("N=%d not run: out of time (%s left of the %s deadline)", n, remaining(ctx).Round(time.Second), *deadline)
			rows = append(rows, skippedRows(n, doPush, doFail, "out of time")...)
			continue
		}
		opts := fleetOptions(b.fleetPrefix, b.subnet+i, n, !b.diskHomes)
		b.progress("bringing up fleet %s (%d hosts, 10.231.%d.0/24)", opts.Name, n, opts.Subnet)
		f, err := upFleet(opts)
		if err != nil {
			b.note("fleet of %d hosts did not come up: %v", n, err)
			rows = append(rows, skippedRows(n, doPush, doFail, "no fleet")...)
			continue
		}
		fleetsUp++
		rows = append(rows, b.onFleet(ctx, f, doPush, doFail)...)
		b.progress("tearing down fleet %s", opts.Name)
		if err := f.Close(); err != nil {
			b.note("tear down fleet %s: %v", opts.Name, err)
		}
	}
	for _, n := range ns {
		if !slices.Contains(ps, n) {
			b.notes = append(b.notes, fmt.Sprintf("push not run at N=%d: a first push of 70 MB to %d hosts sharing %d cores "+
				"does not fit the 10-minute budget with repetitions; `go run ./internal/cmd/drover-bench -push-sizes %s` measures it",
				n, n, runtime.NumCPU(), joinInts(ns)))
		}
	}
	rows = append(rows, b.pushRSS...)
	if *ckpt {
		if remaining(ctx) < ckptBudget/2 {
			b.note("checkpoints not run: out of time (%s left of the %s deadline)", remaining(ctx).Round(time.Second), *deadline)
		} else {
			rows = append(rows, b.checkpoints(ctx)...)
			fleetsUp++
		}
	}

	if *transfer {
		// Issue 27's measurements always run: after the other sections,
		// under a budget of their own rather than what -deadline left
		// (so a run takes at most -deadline + transferBudget).
		tctx, cancel := context.WithTimeout(sigCtx, transferBudget)
		rows = append(rows, b.transfer(tctx)...)
		cancel()
		fleetsUp++
	}

	fmt.Fprintln(stdout)
	if err := WriteText(stdout, rows); err != nil {
		return 1
	}
	for _, n := range b.notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	if fleetsUp == 0 {
		fmt.Fprintln(stderr, "drover-bench: no fleet came up (the benchmark needs root and openssh-server); results not written")
		return 1
	}
	if *doc != "" {
		d := Doc{Command: *cmdline, Date: time.Now(), Machine: machine(), Revision: revision(*doc),
			Elapsed: time.Since(b.start), Load: [2]string{loadStart, loadAvg()}, Rows: rows, Notes: b.notes, Method: method(b, ns)}
		if err := writeDocFile(*doc, d); err != nil {
			fmt.Fprintf(stderr, "drover-bench: %v\n", err)
			return 1
		}
		b.progress("wrote %s", *doc)
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return 130
	}
	return 0
}

// onFleet runs every section that uses this fleet, each under its budget.
func (b *bench) onFleet(ctx context.Context, f *benchFleet, doPush, doFail bool) []Row {
	var rows []Row
	section := func(budget time.Duration, fn func(context.Context) []Row) {
		sctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		rows = append(rows, fn(sctx)...)
	}
	budget := fanoutBudget
	if f.N > 16 {
		budget += fanoutBudget / 2
	}
	if b.sections["fanout"] {
		section(budget, func(ctx context.Context) []Row { return b.fanout(ctx, f) })
	}
	if doPush {
		section(pushBudget, func(ctx context.Context) []Row { return b.push(ctx, f) })
	}
	if doFail {
		section(failBudget, func(ctx context.Context) []Row { return b.failure(ctx, f) })
	}
	if f.N == b.latencyN && b.rtt > 0 && b.sections["latency"] {
		section(latBudget, func(ctx context.Context) []Row { return b.latency(ctx, f) })
	}
	if b.topSection(f.N) {
		section(topBudget, func(ctx context.Context) []Row { return b.top(ctx, f) })
	}
	if b.statusSection(f.N) {
		section(statusBudget, func(ctx context.Context) []Row { return b.status(ctx, f) })
	}
	return rows
}

// skippedRows stands in for the rows of a fleet size that was not run, so
// the table still shows what is missing and why.
func skippedRows(n int, push, fail bool, why string) []Row {
	m := na("%s", why)
	rows := []Row{
		{Section: "fan-out", N: n, What: "`true` on every host", Drover: m, Baseline: "pdsh -R ssh", BaselineTime: m},
		{Section: "fan-out", N: n, What: "`true` on every host", Drover: m, Baseline: "ssh loop", BaselineTime: m},
	}
	if n == 16 {
		rows[0].Target = Target{MinSpeedup: 5}
	}
	if push {
		for _, w := range []string{"first push (70 MB, 3,000 files)", "push, nothing changed", "push, one file changed"} {
			rows = append(rows, Row{Section: "push", N: n, What: w, Drover: m, Baseline: "rsync x N", BaselineTime: m})
		}
	}
	if fail {
		rows = append(rows, Row{Section: "failure", N: n, What: "outside SIGKILL", Drover: m})
	}
	return rows
}

func remaining(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Hour
	}
	return time.Until(d)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 200 {
			return nil, fmt.Errorf("bad fleet size %q (1..200)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// writeDocFile writes the results file through a temporary file, so an
// interrupted run never leaves half a document.
func writeDocFile(path string, d Doc) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if old, err := os.ReadFile(path); err == nil {
		d.Kept = keptSection(string(old))
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := WriteDoc(f, d); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// machine describes this machine for the results file.
func machine() string {
	parts := []string{fmt.Sprintf("%d CPU cores (nproc)", runtime.NumCPU())}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					parts = append(parts, fmt.Sprintf("%.1f GiB memory", kb/(1<<20)))
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				parts = append(parts, strings.TrimSpace(v))
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(data)))
	}
	for _, tool := range [][]string{{"ssh", "-V"}, {"pdsh", "-V"}, {"rsync", "--version"}} {
		if v := toolVersion(tool...); v != "" {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, "; ")
}

func toolVersion(args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	line = strings.TrimSpace(line)
	if args[0] == "rsync" {
		// "rsync  version 3.2.7  protocol version 31"
		line = strings.Join(strings.Fields(line), " ")
	}
	return shorten(line, 60)
}

// revision is the drover commit measured, "-dirty" when the tree has
// uncommitted changes other than to doc, the results file an earlier run
// rewrote.
func revision(doc string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)"+doc).Output(); err == nil && strings.TrimSpace(string(st)) != "" {
		rev += "-dirty"
	}
	return rev
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// homesMethod says where the hosts' files were written.
func homesMethod(disk bool) string {
	if disk {
		return "The hosts' home directories are on this machine's own filesystem (-disk-homes)."
	}
	return "The hosts' home directories are on a tmpfs (pass -disk-homes for this machine's own filesystem). " +
		"This machine's root filesystem can be an ext4 without a journal (some VM images), where every file created soon " +
		"after as many were deleted, as each first-push repetition does, first scans the recently deleted inodes: " +
		"perf put a third of the machine's CPU there, for drover and rsync alike. Real hosts' filesystems (ext4 with a " +
		"journal, xfs) do not do this."
}

// method explains how the figures were taken, for the results file.
func method(b *bench, sizes []int) []string {
	return []string{
		fmt.Sprintf("Hosts are real OpenSSH sshd processes, one per network namespace on this machine (scripts/testfleet), "+
			"reached over a veth bridge; the login user's shell there is %s with /etc/skel's dotfiles, as on Ubuntu hosts. drover, the baselines and every host's sshd share this machine's %d cores, "+
			"so the figures measure CPU spent on SSH and process start more than network; on a real fleet each host "+
			"does its own share of the work.", benchShell, runtime.NumCPU()),
		homesMethod(b.diskHomes),
		fmt.Sprintf("Fleet sizes: %v. Each tool is a fresh process in every repetition (process start and SSH handshakes "+
			"included, as for pdsh). Figures are medians over RUNS repetitions; within a repetition the tools run one "+
			"after the other, starting with a different one each time. Fan-out has one untimed warm-up run per tool.", sizes),
		"OpenSSH gets what drover's inventory gives drover: an ssh_config with the same user, key and strict " +
			"known_hosts (StrictHostKeyChecking yes, BatchMode yes, no ControlMaster).",
		"Fan-out: `drover exec fleet.toml -- true` vs `pdsh -S -R ssh -w ADDRS true` (PDSH_SSH_ARGS=\"-F ssh_config -x %h\"; " +
			"pdsh's default fanout of 32 runs every host at once) vs `ssh -F ssh_config ADDR true` for one host after the other. " +
			"All three hand the line `true` to the host's login shell, which runs its builtin.",
		fmt.Sprintf("Push: a tree generated with math/rand seed %d: %d source files of 0.5-11.5 KB and %d binaries of %d MiB "+
			"(%d files, %.1f MB). `drover push job.toml` vs `rsync -a --delete -e 'ssh -F ssh_config' tree/ ADDR:bench-rsync/`, "+
			"one rsync per host, all started at once, timed until the last one ends. Before every first-push repetition both "+
			"remote directories are deleted on every host; afterwards the first and last host are checked to hold the whole tree. "+
			"\"One file changed\" rewrites one source file (new size and content) before each repetition.",
			defaultTree.Seed, defaultTree.Small, defaultTree.Binaries, defaultTree.BinarySize>>20, defaultTree.Files(), float64(b.treeBytes)/1e6),
		fmt.Sprintf("Failure handling: `drover run --quiet job.toml` with `command = [\"sh\", \"-c\", \"sleep 600\"]`, "+
			"procs_per_host = 2, restart_backoff = \"0s\", stop_grace = \"2s\", max_restarts = %d. The harness finds the "+
			"workload processes by scanning /proc for their command line and network namespace (every %s), SIGKILLs one "+
			"worker (the `sh` the agent started) on a different host in each attempt, and times from the kill to (a) every "+
			"other workload process gone or a zombie, (b) a full set of new `sleep` processes running. \"drover reports it\" "+
			"is the arrival of drover's `exited ...; stopping` event line on its stderr.", b.kills, pollEvery),
		fmt.Sprintf("Checkpoints: %d hosts and a spare, one process each, running a stdlib Python workload: each step is "+
			"%d rounds of sha256 over 1 MiB and a sleep of %d ms (a GPU job's host CPU waiting for its GPU, so that the hosts leave some CPU idle), timed together by the process itself; rank 0 saves a %d MB checkpoint (temp file, rename) "+
			"every %d steps and keeps two; the save is not timed. Step time is the median over every rank's steps after the 5th, "+
			"two runs each with checkpoint_copies = 1, 2, and 2 with checkpoint_copy_rate = %q, in turn. drover reads and writes copies "+
			"through `drover agent sftp --low-priority` (nice 19, idle I/O class) on the hosts. On this machine the hosts, their sshd and drover share the same cores, "+
			"so the copy's CPU (the agents' SFTP servers, sshd's encryption, drover) competes with training as it would not on a real fleet. "+
			"Lost host: rank 0 saves one checkpoint and every rank waits; once drover has copied it, the harness cuts rank 0's "+
			"host's link (testfleet cut) and times until a process runs again on each host of the new group (the spare included), "+
			"which takes keepalive detection (about 6 s), the reconnect that fails (bounded by host_wait for a host just lost), the spare's "+
			"dial and agent install, and staging.",
			ckptHosts, ckptWork, ckptIdleMS, ckptSize>>20, ckptEvery, ckptRate),
		fmt.Sprintf("Transfer (issue 27): %d hosts on the fleet's bridge and a controller in a network namespace of its own, "+
			"%s away (tbf on both ends of its veth; this kernel has no netem), running launcher/checkpoint as drover run does "+
			"with `drover agent send/recv` on the hosts. h0 holds 200 MiB and 2 GiB checkpoints, one file and 1,000 files each "+
			"(homes on disk). Copy: a Watcher copies one file to 2 hosts (checkpoint_copies = 3), timed until both hold a verified "+
			"copy; the baseline sends it through the controller (hosts without agents). Staging: Stage onto 1 and onto 8 hosts "+
			"(one chain). The controller's CPU is getrusage's for the case, its RSS the peak so far; the hosts' CPU comes from "+
			"the fleet's cgroup, and wall time / CPU floor near 1 means this machine's cores, not the network, set the time. "+
			"Then staging again with every host's link at %s (tbf on eth0 in each host's namespace, LimitHosts), as on a fleet "+
			"whose hosts have cores and NICs of their own: onto 8 against onto 1 with the same links is the goal's ratio, and "+
			"wall time / link floor (size / link rate) near 1 means the links set the time. Data staging (issue 38), with the same "+
			"links: the 1,000-file checkpoints as a [[data]] set on h0, staged by launcher/stage (what `drover stage` runs) onto 1, "+
			"2, 4 and 8 hosts (one chain, every file's SHA-256 checked on every host), then staged again with nothing changed "+
			"(a listing per host; target under 3 s); onto N against onto 1 is the goal's ratio (at most 1.5x).",
			transferHosts, transferRate, b.transferLink),
		fmt.Sprintf("Resources: peak RSS (VmHWM from /proc/PID/status, sampled every 10 ms: wait4's ru_maxrss keeps the pre-exec "+
			"peak of memory shared with the harness) and user+sys CPU of the `drover run` process from wait4 after the "+
			"harness interrupts it (SIGINT) at the end of the failure run; steady CPU from /proc/PID/stat over a %s window "+
			"of the first attempt, when drover only supervises.", b.steady),
		"CPU (section cpu): for every compared operation, the tool's user+sys CPU per host from wait4 (its waited-for " +
			"children included: pdsh's and rsync's ssh clients), the fleet's sshd CPU per connection (a cpu accounting cgroup " +
			"holding every host's sshd listener and so everything its connections start, read with the fleet settled before " +
			"and after the run; without cgroups, the listeners' own and reaped children's time from /proc/PID/stat) and the wall time against the CPU floor, (tool + sshd CPU) / cores. CPU time is what a busy " +
			"or different machine distorts least and what carries over to a real fleet, where each host has its own CPU.",
		fmt.Sprintf("Latency (section latency %s, N=%d): a userspace proxy per host (internal/fleettest/netdelay) holds every "+
			"chunk %s in each direction, so a round trip takes %s longer; drover's inventory, OpenSSH's ssh_config and "+
			"known_hosts point at the proxies. Figures are wall time / RTT (medians of %d runs; the restarts are %d "+
			"kills in one drover run, the fresh start is the median of that run's and two more), and \"round trips counted\" are the waits the proxies saw per host: a client chunk after an answer, at least "+
			"the one-way delay after its previous one (pipelined requests are one wait), which a busy machine changes little. "+
			"A 200-file tree is pushed (untimed first pushes, then nothing changed, then one file changed); agent install "+
			"is `drover probe` on hosts whose ~/.drover was deleted minus `drover probe` with the agent there; `drover run` "+
			"starts on hosts without ~/.drover or workdir and is timed to every process running (the failure section's "+
			"process scan), then to the next attempt running after each outside SIGKILL. Goals from issue 20: exec no "+
			"slower than one `ssh HOST true`, a push with nothing changed under 2x that, a fresh host running in under 30 "+
			"round trips, a restart in under 15.", b.rtt, b.latencyN, b.rtt/2, b.rtt, latencyRuns, latencyKills),
		fmt.Sprintf("Scale (section scale, N=%d): light hosts, one SSH server in the harness process serving one address "+
			"each (internal/fleettest/lighthost: x/crypto/ssh's server side, pkg/sftp's server; it passes the transport "+
			"conformance suite). Commands run as this machine's user under %s; the hosts' CPU is the harness's own and "+
			"its children's less drover's. drover's CPU is wait4's user+sys divided by N, its peak RSS VmHWM; the run "+
			"(one process per host, so that 256 agents, not 512, share this machine) covers the whole run, its stop "+
			"included, with the agent binary already on every host (hard links). "+
			"Goals from issue 20 for exec: under 10 ms of drover CPU per host and under 100 MiB RSS. `make bench-quick` "+
			"(drover-bench -quick) skips this section.", b.scaleN, benchShell),
		fmt.Sprintf("Top (section top, N=%d): `drover top --once --json job.toml` timed from start to exit (every host "+
			"dialled, its agent asked, one sample each; medians after one untimed run that installs the agents), and "+
			"the interactive `drover top job.toml` in a pseudo-terminal (script -qfec) refreshing every second, its CPU "+
			"(drover's and script's user+sys) over %s after 5 s to connect. No job runs and the hosts have no "+
			"nvidia-smi. Goals from issue 28: under 2 s at 16 hosts, under 5%% of one core.", b.topN, b.topWindow),
		fmt.Sprintf("Status (section status, N=%d): `drover run -d job.toml` of `sleep 600`, one process per host, then "+
			"`drover status --json job.toml` timed from start to exit (every host dialled, its agent asked for the run; "+
			"the median of the runs after one untimed), then `drover stop --abort`. Goal from issue 26: under 2 s at 16 hosts.", b.statusN),
	}
}

// loadAvg is the first three fields of /proc/loadavg, "" when unreadable.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}
