package launcher

// The supervisor's watches beside the processes' ends: the GPU health
// of its hosts while the group runs, the detached run's record and
// readiness, and letting go of a detached group (a hand-over, a lost
// channel) without stopping it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/nccldiag"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/stacktrace"
	"github.com/droverhq/drover/launcher/straggler"
)

// readyPoll bounds how long a detached run's first attempt may take to
// have every process recorded as running before `drover run -d` is told
// it is, and how often the records are read meanwhile.
const (
	readyWait = 60 * time.Second
	readyPoll = 200 * time.Millisecond
)

// announceRunning records the attempt as running and, on the first
// attempt that got every process running, tells the caller (Ready).
func (s *supervisor) announceRunning(conns []*attemptHost) {
	a := s.a
	a.r.setRecord(hostConns(conns), func(rec *agent.RunRecord) {
		rec.State, rec.Attempt, rec.Restarts, rec.Checkpoint = agent.RunRunning, a.n, a.restarts, a.r.newestCheckpoint()
	})
	if a.r.opts.Ready == nil {
		return
	}
	procs := append([]*running(nil), s.procs...)
	go func() {
		deadline := a.r.now().Add(readyWait)
		for a.r.now().Before(deadline) {
			if s.allRunning(procs) {
				a.r.readyOnce.Do(func() { a.r.opts.Ready(a.r.runID, a.r.runLogDir) })
				return
			}
			time.Sleep(readyPoll)
		}
	}()
}

// allRunning reports whether every process's agent recorded it as
// started (running, or already ended).
func (s *supervisor) allRunning(procs []*running) bool {
	for _, rp := range procs {
		c := s.byHost[rp.p.Host.Name]
		st, _ := s.a.processFiles(c, rp.p.Name())
		rc, err := c.fs.Open(st)
		if err != nil {
			return false
		}
		var rec agent.State
		err = json.NewDecoder(rc).Decode(&rec)
		rc.Close()
		if err != nil || rec.State == agent.ProcStarting {
			return false
		}
	}
	return true
}

// handOver, when another drover took a detached run over with --force
// (ctx ended with a *lease.LostError), lets go of the group without
// stopping it: the channels close, the attach clients detach, and the
// agents keep the group for the new supervisor. It reports whether it did.
func (s *supervisor) handOver(ctx context.Context) bool {
	var lost *lease.LostError
	if !s.a.r.detachedGroup || !errors.As(context.Cause(ctx), &lost) {
		return false
	}
	out := interrupted()
	s.out, s.stopping = &out, true
	s.causes.Stopping(true)
	s.a.r.events.printf("%s: handing the group over; it keeps running", s.a.prefix())
	detachAll(s.procs)
	return true
}

// letGo ends a detached run's attempt because this supervisor lost its
// processes (why), not because they ended: it detaches from all of them
// and the run attaches again (attemptOutcome.reattach).
func (s *supervisor) letGo(why string) {
	out := attemptOutcome{kind: outcomeHostLost, err: errors.New(why), exitCode: -1, reattach: true}
	s.out, s.stopping = &out, true
	s.causes.Stopping(false)
	s.a.r.events.printf("%s: %s; detaching, the group keeps running", s.a.prefix(), why)
	detachAll(s.procs)
}

// detachAll closes every channel of procs without a stop: the attach
// clients let go, the agents keep their processes.
func detachAll(procs []*running) {
	for _, rp := range procs {
		rp.letGo = true
		rp.ctl.Close()
	}
}

// healthWatchers are, by host, the process whose agent watches the
// host's GPU health (agent.RunOptions.HealthFile): the first one of each
// host that the plan gives GPUs. Hosts planned without GPUs (a CPU host
// with gpus = "auto") are not watched.
func (s *supervisor) healthWatchers() map[string]string {
	out := map[string]string{}
	if s.a.cfg.Job.Health == config.HealthOff {
		return out
	}
	for _, p := range s.pl.Processes {
		if _, ok := out[p.Host.Name]; !ok && len(p.Visible) > 0 {
			out[p.Host.Name] = p.Name()
		}
	}
	return out
}

// healthFile is where the watching agent of attempt n writes the host's
// health, under its workdir wd.
func healthFile(wd string, n int) string {
	return path.Join(wd, ".drover/logs", fmt.Sprintf("attempt-%d", n), "health.json")
}

// watchHealth reads each watched host's health file every healthEvery,
// over the host's file access, until ctx ends, and hands each read to
// out. A file not written yet (the watch starts with the process) is
// skipped.
func (s *supervisor) watchHealth(ctx context.Context, out chan<- healthRead) {
	for host := range s.healthWatchers() {
		c := s.byHost[host]
		file := healthFile(remoteAbs(c.home, c.host.Workdir), s.a.n)
		go func() {
			for hostio.Sleep(ctx, healthEvery) == nil {
				rep, err := readHealthFile(c.fs, file)
				if err != nil {
					continue
				}
				rep.Host = host
				select {
				case out <- healthRead{host: host, rep: rep}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

// readHealthFile reads one report the health watch wrote.
func readHealthFile(fsys cluster.FS, file string) (gpu.HostReport, error) {
	f, err := fsys.Open(file)
	if err != nil {
		return gpu.HostReport{}, err
	}
	defer f.Close()
	var rep gpu.HostReport
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("read %s: %w", file, err)
	}
	return rep, nil
}

// onHealth judges a read while the attempt runs: under "enforce" a
// critical finding fences the host and stops the group (a host failure);
// warnings are printed once per attempt.
func (s *supervisor) onHealth(h healthRead) {
	if s.stopping {
		return
	}
	for _, f := range s.a.findings(h.rep, false) {
		if f.Critical && s.a.cfg.Job.Health == config.HealthEnforce {
			s.a.r.fence(h.host, f)
			reason := fmt.Sprintf("GPU health: %s; health = \"enforce\" keeps %s out: the group restarts without it", f, h.host)
			// Its spare is chosen now, so that the restart sets up
			// (pushes to, stages the checkpoint on) the spare, not it.
			if spare, ok := s.a.standIn(h.host); ok {
				reason += ", on spare " + spare
			}
			s.a.r.events.notify(notify.Event{Kind: notify.Health, Attempt: s.a.n, Host: h.host, Message: reason})
			s.stop(attemptOutcome{kind: outcomeHostLost, err: errors.New(reason), exitCode: -1}, reason)
			return
		}
		if key := f.String(); !s.warned[key] {
			s.warned[key] = true
			s.a.warn(f)
		}
	}
}

// watchStragglers names, until ctx ends, the ranks of procs that the
// straggler watch finds far slower than their peers (package
// launcher/straggler decides; docs/health.md#stragglers): an event, a
// notification and, for a detached run, the run record drover status
// reads. Each round reads every host once with `drover agent top` over
// the connection the attempt holds. rep, when on_straggler = "replace",
// is told each straggler named and let go.
func watchStragglers(ctx context.Context, a *attempt, procs []*running, byHost map[string]*attemptHost, rep *straggler.Replacer) {
	sp := a.cfg.Job.Straggler
	if sp.Factor <= 0 && sp.ClockFactor <= 0 || len(a.r.opts.Allocation) > 0 {
		// In a Slurm allocation each sample would be a job step per
		// node every 5 s (slurmctld's load), and one cut short by a
		// stop before Slurm launched it stays behind in the job.
		if sp.On == config.StragglerReplace && len(a.r.opts.Allocation) > 0 && a.n == a.r.firstAttempt {
			a.r.events.printf(`%s: on_straggler = "replace" does nothing inside a Slurm allocation: the straggler watch is off there, and drover cannot bring a spare node into the allocation`, a.prefix())
		}
		return
	}
	if rep != nil {
		go rep.Run(ctx)
	}
	o := straggler.WatchOptions{Policy: straggler.Policy{Factor: sp.Factor, ClockFactor: sp.ClockFactor}}
	for _, rp := range procs {
		o.Ranks = append(o.Ranks, straggler.Rank{Process: rp.p.Name(), Host: rp.p.Host.Name, Rank: rp.p.Rank, GPUs: rp.p.GPUs})
	}
	o.Sample = func(ctx context.Context, host string) (agent.TopSample, error) {
		c := byHost[host]
		var s agent.TopSample
		out, said, err := remote.Read(ctx, c.t, agent.TopCommand(c.agent, agent.TopOptions{Workdir: c.host.Workdir}), "drover agent top", 4<<20)
		if err != nil {
			return s, fmt.Errorf("drover agent top on %s: %w %s", host, err, said)
		}
		return s, json.Unmarshal(out, &s)
	}
	o.Named = func(f straggler.Finding) {
		a.r.events.printf("%s: %s", a.prefix(), f.Message)
		a.r.events.notify(notify.Event{Kind: notify.Straggler, Attempt: a.n, Host: f.Host, Process: f.Process,
			Rank: f.Rank, HasRank: f.Rank >= 0, Message: f.Message})
		if rep != nil {
			rep.Named(f)
		}
	}
	o.Cleared = func(f straggler.Finding) {
		a.r.events.printf("%s: %s", a.prefix(), f.Message)
		if rep != nil {
			rep.Cleared(f)
		}
	}
	o.Changed = func(named []string) {
		a.r.setRecord(nil, func(rec *agent.RunRecord) { rec.Stragglers, rec.StragglersAttempt = named, a.n })
	}
	straggler.Watch(ctx, o)
}

// newReplacer is on_straggler = "replace" for s's attempt
// (straggler.Replacer; nil under "warn"): it waits for the group's next
// checkpoint after a straggler is named, held off the straggler's host
// (checkpoint.RestorableWithout: the restart stages only from the hosts
// it keeps), then hands the straggler to the supervisor (s.replace,
// replaceStraggler). Whether a spare is free is
// read here, in the supervisor's goroutine, as the attempt starts;
// replaceStraggler takes the spare, and says so when it is gone since.
func newReplacer(s *supervisor) *straggler.Replacer {
	a := s.a
	if a.cfg.Job.Straggler.On != config.StragglerReplace {
		return nil
	}
	rec, err := a.r.checkpointRecord(a.r.logRoot, a.cfg.Job.Name)
	if err != nil {
		a.r.events.printf(`%s: warning: on_straggler = "replace" cannot follow the checkpoints (%v): a straggler is only named`, a.prefix(), err)
		return nil
	}
	_, free := a.freeSpare()
	j := a.cfg.Job
	noCopy := straggler.NoCopyWhy(j.CheckpointCopies, len(s.pl.Hosts), j.CheckpointMirror != "")
	return straggler.NewReplacer(straggler.ReplaceOptions{
		Newest: func() int {
			n := 0
			for _, e := range rec.Entries() {
				n = max(n, e.Seq)
			}
			return n
		},
		Kept: func(host string) int {
			e, _ := checkpoint.NewestWithout(rec.Entries(), host)
			return e.Seq
		},
		Copies:    noCopy == "",
		SpareFree: func(string) bool { return free },
		Replace: func(f straggler.Finding) {
			select {
			case s.replace <- f:
			case <-s.sessions.Done():
			}
		},
		Waiting: func(f straggler.Finding) {
			a.r.events.printf(`%s: on_straggler = "replace": %s is replaced by a spare at the group's next checkpoint`, a.prefix(), f.Host)
		},
		NoSpare: func(f straggler.Finding) {
			a.r.events.printf(`%s: on_straggler = "replace": no spare host is free to replace %s; rank %d is only named (add a host with spare = true)`, a.prefix(), f.Host, f.Rank)
		},
		WaitCopy: func(f straggler.Finding) {
			a.r.events.printf(`%s: on_straggler = "replace": checkpoint %s is held only on %s so far; the replacement waits for drover's copy of it on another host`, a.prefix(), a.r.newestCheckpoint(), f.Host)
		},
		NoCopy: func(f straggler.Finding) {
			a.r.events.printf(`%s: on_straggler = "replace": checkpoint %s is held only on %s and drover makes no copy of it elsewhere (%s): %s is not replaced until another host holds a newer checkpoint; rank %d is only named`,
				a.prefix(), a.r.newestCheckpoint(), f.Host, noCopy, f.Host, f.Rank)
		},
	})
}

// replaceStraggler stops the group to restart it from the newest
// checkpoint with a spare in place of f's host, which is set aside for
// the rest of the run (a planned restart: outcomeReplaced costs no
// restart). A spare taken since the attempt started (a GPU health
// fence) leaves the rank only named.
func replaceStraggler(s *supervisor, f straggler.Finding) {
	a := s.a
	if s.stopping {
		return
	}
	spare, ok := a.standIn(f.Host)
	if !ok {
		a.r.events.printf(`%s: on_straggler = "replace": no spare host is free to replace %s any more; rank %d is only named`, a.prefix(), f.Host, f.Rank)
		return
	}
	// Fenced, so that no later choice of a spare takes it back (it may
	// be a spare itself, standing in for another host).
	a.r.fence(f.Host, gpu.Finding{Host: f.Host, GPU: "-", What: fmt.Sprintf("set aside as a straggler (rank %d %s)", f.Rank, f.What()),
		Fix: "find why it is slow (drover top), then run again"})
	at := keptCheckpoint(a, f.Host)
	msg := fmt.Sprintf("replacing %s (rank %d straggles: %s) with spare %s at checkpoint %s", f.Host, f.Rank, f.What(), spare, at)
	a.r.events.notify(notify.Event{Kind: notify.Straggler, Attempt: a.n, Host: f.Host, Process: f.Process,
		Rank: f.Rank, HasRank: f.Rank >= 0, Message: msg, Checkpoint: at})
	s.stop(attemptOutcome{kind: outcomeReplaced, err: errors.New(msg), exitCode: -1,
		plan: restart.Plan{Host: f.Host, Spare: spare, Checkpoint: at, Why: f.Message}}, msg)
}

// keptCheckpoint names the newest checkpoint the group can restart from
// without host (checkpoint.NewestWithout): the one a replacement of
// host's restart resumes from.
func keptCheckpoint(a *attempt, host string) string {
	rec, err := a.r.checkpointRecord(a.r.logRoot, a.cfg.Job.Name)
	if err != nil || rec == nil {
		return ""
	}
	e, _ := checkpoint.NewestWithout(rec.Entries(), host)
	return e.Name
}

// Hang detection (hang_timeout): the group is hung when no process showed
// progress for that long. Progress is output (any write to the process's
// stdout or stderr) or a change of the mtime of its DROVER_PROGRESS_FILE,
// which drover polls on every host; the clock is drover's own monotonic
// one (runner.mono), so neither the hosts' clocks nor a step of the
// controller's wall clock (NTP, a suspended VM) matter: a +40 s step once
// declared a healthy group hung.
//
// The clock starts once every process has shown progress once: start-up
// (importing torch takes from seconds to minutes, depending on the host's
// load and filesystem) is not a hang, and a timeout sized for the
// training loop would otherwise fire on a slow start. A process that
// never shows any progress leaves the group to its own timeouts.

// stackDumpWait is how long the processes get to print their stacks
// between "stacks" and "stop": a SIGTERM that arrives while Python is
// still printing would cut its stack short.
const stackDumpWait = 2 * time.Second

// hangCheckEvery is how often the group's progress is looked at (and the
// progress files polled) for a given hang_timeout.
func hangCheckEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 100*time.Millisecond), 2*time.Second)
}

// progressWriter marks its process as progressing at every write.
type progressWriter struct {
	rp   *running
	mono func() time.Duration
}

func (w progressWriter) Write(p []byte) (int, error) {
	w.rp.markProgress(w.mono())
	return len(p), nil
}

// markProgress records progress at at (runner.mono); stored one more, so
// that 0 keeps meaning "none yet".
func (rp *running) markProgress(at time.Duration) { rp.progress.Store(int64(at) + 1) }

// lastProgress is the process of procs that showed progress last, and when (on
// runner.mono's clock); started is false while a process that still runs
// has shown none yet.
func lastProgress(procs []*running) (last *running, at time.Duration, started bool) {
	var latest int64
	started = true
	for _, rp := range procs {
		p := rp.progress.Load()
		if p == 0 && !rp.done {
			started = false
		}
		if last == nil || p > latest {
			last, latest = rp, p
		}
	}
	return last, time.Duration(latest - 1), started
}

// checkHang ends the attempt as hung when no process showed progress for
// hang_timeout.
func (s *supervisor) checkHang() {
	timeout := s.a.cfg.Job.HangTimeout
	if s.stopping || len(s.procs) == 0 {
		return
	}
	rp, at, started := lastProgress(s.procs)
	idle := s.a.r.mono() - at
	if !started || idle < timeout {
		return
	}
	reason := fmt.Sprintf("group hung: no process showed progress for %s (hang_timeout = %s); the last was %s@%s at %s",
		idle.Round(time.Second), timeout, rp.p.Name(), rp.p.Host.Name, s.a.r.now().Add(-idle).Format("15:04:05.000"))
	out := attemptOutcome{kind: outcomeHung, err: errors.New(reason), exitCode: -1}
	s.out, s.stopping = &out, true
	s.causes.Stopping(false)
	s.a.r.events.printf("%s: %s; asking every Python process for its stack", s.a.prefix(), reason)
	s.hangReason = reason
	s.verdict = takeVerdict(s.byHost, s.a.r.events, s.a.prefix(), rasOf(s.procs, s.a.logDir))
}

// verdictWait bounds the hang verdict: every host's `drover agent
// stacks`, each process's dump within stackWait.
const (
	verdictWait = 15 * time.Second
	stackWait   = 5 * time.Second
)

// takeVerdict takes the stack of every live process of the group on
// every host at once (`drover agent stacks` through drover's hook, which
// stops no process) and judges them (package
// stacktrace): which ranks wait in a collective and which are elsewhere.
// The verdict comes on the channel, "" when no stack came. It takes
// them through drover's hook alone: the run agents' dump into the logs
// that follows calls py-spy where the host has it, once per process.
//
// With ras.addr set, the agent on ras.host also asks NCCL's RAS service
// there (package nccldiag), and the verdict quotes it (rasVerdict).
func takeVerdict(byHost map[string]*attemptHost, events *eventLog, prefix string, ras rasAsk) <-chan string {
	hosts := make([]*attemptHost, 0, len(byHost))
	for _, c := range byHost {
		hosts = append(hosts, c)
	}
	out := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), verdictWait)
		defer cancel()
		var mu sync.Mutex
		var ranks []stacktrace.Rank
		var rasPart string
		_ = forEach(hosts, func(c *attemptHost) error {
			o := agent.StacksOptions{Workdir: remoteAbs(c.home, c.host.Workdir), HookOnly: true, Wait: stackWait}
			if c.host.Name == ras.host {
				o.RAS = ras.addr
			}
			rep, err := c.client().Stacks(ctx, o)
			if err != nil {
				events.printf("%s: warning: no stacks from %s: %v", prefix, c.host.Name, err)
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if o.RAS != "" {
				rasPart = rasVerdict(rep, ras, events, prefix)
			}
			for _, p := range rep.Processes {
				if p.Rank >= 0 {
					ranks = append(ranks, stacktrace.Rank{Rank: p.Rank, Label: p.Name + "@" + c.host.Name, Stack: p.Stack, Err: p.Error})
				}
			}
			return nil
		})
		var parts []string
		if len(ranks) > 0 {
			parts = append(parts, stacktrace.Summary(ranks))
		}
		if rasPart != "" {
			parts = append(parts, rasPart)
		}
		out <- strings.Join(parts, "; ")
	}()
	return out
}

// rasAsk is where the hang verdict asks NCCL's RAS service: rank 0's
// host, its NCCL_RAS_ADDR there, and the file that keeps the whole answer.
type rasAsk struct{ host, addr, file string }

// rasOf is the rasAsk of a group: its lead process's (rank 0; torchrun's
// node 0; jax's process 0) NCCL_RAS_ADDR, which package plan sets for a
// job that uses NCCL; none without one.
func rasOf(procs []*running, logDir string) rasAsk {
	for _, rp := range procs {
		if a := rp.p.Env[plan.RASAddrEnv]; a != "" && rp.p.Index == 0 {
			return rasAsk{host: rp.p.Host.Name, addr: a, file: filepath.Join(logDir, "nccl-ras.txt")}
		}
	}
	return rasAsk{}
}

// rasVerdict is the hang verdict's quote of NCCL's RAS answer in rep
// ("NCCL RAS on h1: <its errors> (all of it in FILE)"), whose whole text
// it keeps in ras.file. No service there (an NCCL before 2.24, RAS off)
// is quiet: the verdict stands without it.
func rasVerdict(rep *agent.StacksReport, ras rasAsk, events *eventLog, prefix string) string {
	if rep.RAS == "" {
		if rep.RASError != "" && !rep.NoRAS {
			events.printf("%s: warning: NCCL's RAS service on %s did not answer: %s", prefix, ras.host, nccldiag.Clean(rep.RASError))
		}
		return ""
	}
	text := nccldiag.Clean(rep.RAS) // the agent cleaned it; the host is not trusted to have
	where := ""
	if err := os.WriteFile(ras.file, []byte(text+"\n"), 0o644); err != nil {
		events.printf("%s: warning: keep NCCL's RAS answer: %v", prefix, err)
	} else {
		where = " (all of it in " + ras.file + ")"
	}
	return "NCCL RAS on " + ras.host + ": " + nccldiag.Short(text) + where
}

// tellVerdict names, in the hang's event and the attempt's cause, the
// ranks that are not in the collective, then asks every Python process
// of s to print its stack into its log and gives it stackDumpWait before
// the stop. (A function: the supervisor's methods are at their limit.)
func tellVerdict(s *supervisor, v string) {
	s.verdict = nil
	msg := s.hangReason
	if v != "" {
		msg += "; " + v
		s.a.r.events.printf("%s: hang verdict: %s", s.a.prefix(), v)
		if s.out != nil && s.out.kind == outcomeHung {
			s.out.err = errors.New(msg)
		}
	}
	s.a.r.events.notify(notify.Event{Kind: notify.Hang, Attempt: s.a.n, Message: msg, Checkpoint: s.a.r.newestCheckpoint()})
	s.send("stacks")
	s.stacksDone = time.After(stackDumpWait)
}

// watchProgressFiles polls every host's progress directory until ctx
// ends; a file whose mtime changed marks its process as progressing.
func (s *supervisor) watchProgressFiles(ctx context.Context) {
	byFile := map[string]*running{}
	dirs := map[string]*attemptHost{}
	for _, rp := range s.procs {
		f := rp.p.Env["DROVER_PROGRESS_FILE"]
		if f == "" {
			continue
		}
		byFile[f] = rp
		dirs[path.Dir(f)] = s.byHost[rp.p.Host.Name]
	}
	seen := map[string]time.Time{}
	every := hangCheckEvery(s.a.cfg.Job.HangTimeout)
	for first := true; ; first = false {
		for dir, c := range dirs {
			entries, err := c.fs.ReadDir(dir)
			if err != nil {
				continue // a lost host shows elsewhere
			}
			for _, e := range entries {
				f := path.Join(dir, e.Name())
				rp := byFile[f]
				if rp == nil {
					continue
				}
				old, ok := seen[f]
				if (ok && !old.Equal(e.ModTime())) || (!ok && !first) {
					rp.markProgress(s.a.r.mono())
					rp.reported.Store(true)
				}
				seen[f] = e.ModTime()
			}
		}
		if hostio.Sleep(ctx, every) != nil {
			return
		}
	}
}

// exitRecordWait bounds how long drover asks a host's agent for its
// record of a process whose channel closed without the exit status
// (recordedExit), a new connection included: what a lost host costs
// before it is declared lost.
const exitRecordWait = 10 * time.Second

// recordedExit is rp's end (on c, in attempt a) as its channel reported
// it (err), unless the channel closed without the exit status (the
// connection died, or sshd went away, between the command's exit and
// the status's arrival) and the agent's own record on the host
// (agent.State, written before the agent exits) says how the command
// ended: that end then stands, so that a clean exit is never taken for a
// lost host and the group is not restarted for it. A record that says
// the agent stopped its command (the channel's loss stopped it), or no
// record, leaves the loss as it was. It runs in the exit's goroutine, not
// the supervisor's loop: a host that is really gone costs up to
// exitRecordWait before it is declared lost.
func recordedExit(a *attempt, c *attemptHost, rp *running, err error) error {
	if !cluster.IsConnectionLost(err) || c == nil {
		return err
	}
	file, _ := a.processFiles(c, rp.p.Name())
	ctx, cancel := context.WithTimeout(context.Background(), exitRecordWait)
	defer cancel()
	opts := a.r.opts.Dial
	opts.Inventory = config.Endpoints(a.cfg.Hosts) // a ProxyJump may name one
	st, rerr := readRecord(ctx, a.r.pool, c.hostConn, file, opts)
	if rerr != nil || st.RunID != a.r.runID || st.Attempt != a.n || st.Exit == nil ||
		(st.State != agent.ProcExited && st.State != agent.ProcFailed) {
		return err
	}
	a.r.events.printf("%s: the channel of %s@%s closed without its exit status (%v); its agent's record says it exited %d",
		a.prefix(), rp.p.Name(), rp.p.Host.Name, err, *st.Exit)
	if *st.Exit == 0 {
		return nil
	}
	return &cluster.ExitError{Host: rp.p.Host.Name, Code: *st.Exit}
}

// readRecord reads an agent's record of its process at file on c's host:
// over c's file access, else over a connection dialled anew (the old one
// may be what was lost), which the pool keeps for the next attempt.
func readRecord(ctx context.Context, pool *connPool, c *hostConn, file string, opts cluster.DialOptions) (*agent.State, error) {
	b, err := readSmallCtx(ctx, c.fs, file)
	if err != nil && ctx.Err() == nil {
		var nc *hostConn
		nc, err = pool.redial(c, func() (*hostConn, error) {
			t, err := cluster.Dial(ctx, c.host.Endpoint(), opts)
			if err != nil {
				return nil, err
			}
			fsys, err := t.FS(ctx)
			if err != nil {
				t.Close()
				return nil, err
			}
			return &hostConn{host: c.host, t: t, fs: fsys, home: c.home}, nil
		})
		if err == nil {
			b, err = readSmallCtx(ctx, nc.fs, file)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s on %s: %w", file, c.host.Name, err)
	}
	var st agent.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse %s on %s: %w", file, c.host.Name, err)
	}
	return &st, nil
}

// readSmallCtx is hostio.ReadSmall of a record, given up when ctx ends (a
// connection that hangs rather than fails).
func readSmallCtx(ctx context.Context, fsys cluster.FS, file string) ([]byte, error) {
	if fsys == nil {
		return nil, errors.New("no file access")
	}
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := hostio.ReadSmall(fsys, file, 1<<20)
		got <- read{b, err}
	}()
	select {
	case r := <-got:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
