package launcher

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"
)

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

// lastProgress is the process that showed progress last, and when (on
// runner.mono's clock); started is false while a process that still runs
// has shown none yet.
func (s *supervisor) lastProgress() (last *running, at time.Duration, started bool) {
	var latest int64
	started = true
	for _, rp := range s.procs {
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
	rp, at, started := s.lastProgress()
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
				}
				seen[f] = e.ModTime()
			}
		}
		if sleepCtx(ctx, every) != nil {
			return
		}
	}
}
