package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
)

// earlyFinishWait is how long a process (or torchrun worker) that exited 0
// while others still run waits to be named in an event: at the end of a
// healthy run every rank exits 0 within moments of the others, which is
// no event; a rank that finished this long before the rest (a desync, a
// script that skipped its training loop) is one. A failure in the
// meantime names it at once, before the failure, as the attempt's first
// event.
const earlyFinishWait = 5 * time.Second

// agentStopWait bounds drover's stop, through the host, of what an agent
// that died left behind, beyond stop_grace.
const agentStopWait = 10 * time.Second

// workerMsg is a torchrun worker's end, reported by its host's agent
// (agent.WorkerExit) and timed by drover's clock when its line arrived.
type workerMsg struct {
	rp *running
	w  agent.WorkerExit
	at time.Time
}

// earlyFinish is a process or worker that exited 0 while others still
// ran, not yet named in an event.
type earlyFinish struct {
	rp   *running
	what string // "worker-0@h1 finished while 4 others still run"
	at   time.Time
}

// workerLines turns the agent's worker reports in a process's stderr into
// workerMsgs for the supervisor, as each whole line arrives. It never
// blocks the stream: a report that finds the queue full is dropped (the
// agent's exit status still tells the failure).
type workerLines struct {
	rp   *running
	out  chan<- workerMsg
	now  func() time.Time
	mu   sync.Mutex
	line []byte
}

func (w *workerLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		l := string(w.line[:i])
		w.line = w.line[i+1:]
		if we, ok := agent.ParseWorkerExit(l); ok {
			select {
			case w.out <- workerMsg{rp: w.rp, w: we, at: w.now()}:
			default:
			}
		}
	}
	if len(w.line) > 64<<10 {
		w.line = w.line[:0] // no report is this long
	}
	return len(p), nil
}

// who names a torchrun worker with its drover process: "rank 3
// (node-1@h2)".
func (m workerMsg) who() string {
	return fmt.Sprintf("rank %d (%s@%s)", m.w.Rank, m.rp.p.Name(), m.rp.p.Host.Name)
}

// onWorkerExit acts on a torchrun worker's end the moment drover hears of
// it: the first abnormal one is the attempt's failure (its agent stops
// its host's group and exits with the worker's status, but the group
// need not wait for that, nor for torchrun's exit barrier); one that
// exited 0 while the group runs may be an early finish; one that fails
// once the group is stopping is a victim, listed after the cause.
func (s *supervisor) onWorkerExit(m workerMsg) {
	var cause string
	if m.w.Abnormal() && !m.rp.done && (!s.stopping || !s.stoppedWorker(m.w)) {
		// Read only for a failure to name (one request to its host).
		cause = s.a.workerCause(s.byHost[m.rp.p.Host.Name], m.w)
	}
	switch {
	case m.rp.done:
	case s.stopping && m.w.Abnormal() && !s.stoppedWorker(m.w):
		m.rp.setCause(fmt.Sprintf("%s %s%s", m.who(), m.w.How(), colon(cause)), m.at)
	case s.stopping:
	case !m.w.Abnormal():
		what := fmt.Sprintf("%s finished while %d other worker(s) on %s and %d other host(s) still run",
			m.who(), m.w.Running, m.rp.p.Host.Name, s.remaining-1)
		s.early = append(s.early, earlyFinish{rp: m.rp, what: what, at: m.at})
		s.armEarly()
		s.earlyExplainsHeld()
	default:
		reason := fmt.Sprintf("%s %s", m.who(), m.w.How()) + colon(cause)
		m.rp.setCause(reason, m.at)
		s.flushEarly()
		reason = s.withFirstEvent(reason)
		s.fail(m.rp, attemptOutcome{kind: outcomeFailed, err: errors.New(reason), exitCode: m.w.Status}, reason)
	}
}

func colon(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// workerCause is why a torchrun worker failed: the exception in its own
// error file, else the end of its own stderr.
func (a *attempt) workerCause(c *attemptHost, w agent.WorkerExit) string {
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	if fsys != nil && path.IsAbs(w.ErrorFile) {
		if b, err := readSmall(fsys, w.ErrorFile, 1<<20); err == nil {
			if cause, ok := parseErrorFile(b); ok {
				return cause
			}
		}
	}
	if w.Stderr != "" {
		return "stderr: " + w.Stderr
	}
	return ""
}

// noteEarly records rp's exit 0 while others still run (pytorch and the
// other per-process frameworks).
func (s *supervisor) noteEarly(rp *running, at time.Time) {
	others := s.remaining
	if s.held != nil {
		others++ // the held failure's process still ran when it finished
	}
	what := fmt.Sprintf("%s@%s finished while %d other(s) still run", rp.p.Name(), rp.p.Host.Name, others)
	s.early = append(s.early, earlyFinish{rp: rp, what: what, at: at})
	s.armEarly()
}

func (s *supervisor) armEarly() {
	if s.earlyAt == nil {
		s.earlyAt = time.After(earlyFinishWait)
	}
}

// flushEarly names every early finish not yet named, in the order drover
// saw them, each as the event it is; the first of the attempt is its
// first event, which the summary gives as the root cause should the
// attempt fail.
func (s *supervisor) flushEarly() {
	s.earlyAt = nil
	for _, e := range s.early {
		s.a.r.events.printf("%s: %s (exit 0 at %s)", s.a.prefix(), e.what, e.at.Format("15:04:05.000"))
		if !s.earlySaid {
			s.earlySaid, s.firstEvent, s.firstEventAt = true, e.what, e.at
			e.rp.setCause(e.what+": the attempt's first event", e.at)
			if e.rp.done { // its exit is recorded already
				s.a.r.recordCause(e.rp.p, e.rp.cause, e.rp.causeAt)
			}
		}
	}
	s.early = s.early[:0]
}

// withFirstEvent adds the attempt's first event, when there was one, to a
// failure's reason: after an early finish (a desync) the failing rank is
// most likely a victim of it.
func (s *supervisor) withFirstEvent(reason string) string {
	if s.firstEvent == "" {
		return reason
	}
	return reason + "; the attempt's first event: " + s.firstEvent
}

// setCause records why rp's attempt went wrong and when drover saw it;
// the first cause of a process counts.
func (rp *running) setCause(cause string, at time.Time) {
	if rp.cause == "" {
		rp.cause, rp.causeAt = cause, at
	}
}

// agentDied reports whether err says that the agent itself ended by a
// signal (SIGKILL, the OOM killer) rather than reporting its command's
// exit: the agent reports a command's signal death as a status (137),
// never as a signal of its own.
func agentDied(err error) (string, bool) {
	var ee *cluster.ExitError
	if errors.As(err, &ee) && ee.Signal != "" {
		return "SIG" + ee.Signal, true
	}
	return "", false
}

// stopLeftBy stops, through rp's host, what rp's agent left running when
// it died without an exit report: its command dies with it
// (Pdeathsig), but what the command started lives on in its process
// group. `drover agent stop` finds the group by the pidfile the agent
// wrote. drover waits for it (stopWaits) before the attempt ends, and so
// before it exits.
func (s *supervisor) stopLeftBy(rp *running, how string) {
	c := s.byHost[rp.p.Host.Name]
	if c == nil || c.agent == "" {
		return
	}
	grace := s.a.cfg.Job.StopGrace
	pidfile := path.Join(remoteAbs(c.home, rp.p.Workdir), pidDir, rp.p.Name()+".pid")
	who := fmt.Sprintf("%s@%s", rp.p.Name(), rp.p.Host.Name)
	s.a.r.events.printf("%s: the agent of %s died (%s) without reporting its command's exit; stopping what it left on %s", s.a.prefix(), who, how, rp.p.Host.Name)
	s.stopWaits.Add(1)
	go func() {
		defer s.stopWaits.Done()
		ctx, cancel := context.WithTimeout(context.Background(), grace+agentStopWait)
		defer cancel()
		out := cluster.NewTailBuffer(4 << 10)
		err := c.client().Stop(ctx, pidfile, grace, false, out)
		said := strings.TrimSpace(out.String())
		switch {
		case err != nil:
			s.a.r.events.printf("%s: stop what the agent of %s left on %s: %v %s", s.a.prefix(), who, hostLabel(c.host), err, said)
		case said != "":
			s.a.r.events.printf("%s: %s: %s", s.a.prefix(), rp.p.Host.Name, said)
		}
	}()
}

// stoppedWorker reports a worker's end that drover's own stop explains:
// SIGTERM or SIGKILL, or any end once the run was interrupted.
func (s *supervisor) stoppedWorker(w agent.WorkerExit) bool {
	return w.Signal == "TERM" || w.Signal == "KILL" || (s.out != nil && s.out.kind == outcomeInterrupted)
}
