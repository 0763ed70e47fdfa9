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
	"github.com/droverhq/drover/launcher/cause"
	"github.com/droverhq/drover/launcher/hostio"
)

// agentStopWait bounds drover's stop, through the host, of what an agent
// that died left behind, beyond stop_grace.
const agentStopWait = 10 * time.Second

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

// onWorkerExit hands a torchrun worker's end to the causes the moment
// drover hears of it (see cause.Tracker.WorkerEnded), with the cause
// read from its host when it is a failure to name.
func (s *supervisor) onWorkerExit(m workerMsg) {
	w := cause.Worker{Proc: m.rp.i, At: m.at, Rank: m.w.Rank, Failed: m.w.Abnormal(), How: m.w.How(),
		Status: m.w.Status, Signal: m.w.Signal, Running: m.w.Running}
	if s.causes.NeedsWorkerCause(w) {
		// Read only for a failure to name (one request to its host).
		w.Cause = workerCause(s.byHost[m.rp.p.Host.Name], m.w)
	}
	w.Seen = s.a.r.now()
	s.act(s.causes.WorkerEnded(w))
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

// workerCause is why a torchrun worker failed: the exception in its own
// error file, else the end of its own stderr.
func workerCause(c *attemptHost, w agent.WorkerExit) string {
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	if fsys != nil && path.IsAbs(w.ErrorFile) {
		if b, err := hostio.ReadSmall(fsys, w.ErrorFile, 1<<20); err == nil {
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
