package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Pidfile is what a running agent records about its group, so that a later
// drover can find a group an earlier one left behind (controller SIGKILLed
// with the channel kept open, agent killed by the OOM killer) and stop it.
type Pidfile struct {
	AgentPid int `json:"agent_pid"`
	// AgentStart and ChildStart are start times in clock ticks after boot
	// (Linux; 0 elsewhere). With them a pid that was reused by another
	// process is never mistaken for ours.
	AgentStart uint64    `json:"agent_start_ticks,omitempty"`
	ChildPid   int       `json:"child_pid"`
	ChildStart uint64    `json:"child_start_ticks,omitempty"`
	Pgid       int       `json:"pgid"`
	Job        string    `json:"job,omitempty"`
	Argv       []string  `json:"argv"`
	Started    time.Time `json:"started"`
}

// writePidfile writes pf to path atomically (temporary file and rename), so
// that a reader never sees half a file.
func writePidfile(path string, pf Pidfile) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // argv stays readable: "a > b", not "a \u003e b"
	enc.SetIndent("", "  ")
	if err := enc.Encode(pf); err != nil {
		return fmt.Errorf("encode pidfile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), privateDir); err != nil {
		return fmt.Errorf("create pidfile directory: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write pidfile: %w", err)
	}
	_, werr := tmp.Write(buf.Bytes())
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write pidfile %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write pidfile: %w", err)
	}
	return nil
}

// readPidfile reads path; a missing file is (nil, nil).
func readPidfile(path string) (*Pidfile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pidfile: %w", err)
	}
	var pf Pidfile
	if err := json.Unmarshal(data, &pf); err != nil {
		return nil, fmt.Errorf("parse pidfile %s: %w", path, err)
	}
	return &pf, nil
}

// removePidfile removes path if it still belongs to the agent agentPid: a
// newer agent may have taken the name over.
func removePidfile(path string, agentPid int) {
	pf, err := readPidfile(path)
	if err == nil && pf != nil && pf.AgentPid != agentPid {
		return
	}
	_ = os.Remove(path)
}

// StopLeftover stops the group that the pidfile at path describes, if it
// still runs, and says what it stopped ("" when there was nothing). A live
// agent is asked to stop (SIGTERM) so that it cleans up as usual; a group
// whose agent is gone is stopped directly (SIGTERM, SIGKILL after grace).
// Pids are trusted only when they still name what the pidfile recorded (a
// drover agent; the same start time where known): a pidfile whose pids were
// reused by unrelated processes is stale. The pidfile is removed in every
// case, a corrupt one too.
func StopLeftover(ctx context.Context, path string, grace time.Duration) (string, error) {
	if grace <= 0 {
		grace = DefaultGrace
	}
	pf, err := readPidfile(path)
	if err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		if errors.As(err, &se) || errors.As(err, &te) {
			// Never written by a finished agent (writes are atomic):
			// not ours to interpret. Remove so it cannot block a run.
			_ = os.Remove(path)
			return "", nil
		}
		return "", fmt.Errorf("stop leftover from %s: %w", path, err)
	}
	if pf == nil {
		return "", nil
	}
	defer removePidfile(path, pf.AgentPid)

	agentAlive := pf.AgentPid > 0 && isAgent(pf.AgentPid, pf.AgentStart)
	g := group{pgid: pf.Pgid}
	groupAlive := pf.Pgid > 1 && ownsGroup(pf) && g.alive()
	if !agentAlive && !groupAlive {
		return "", nil
	}

	// Outer bound: a live agent gets its own grace plus time to flush
	// and exit before both it and the group are killed.
	limit := grace
	if agentAlive {
		_ = syscall.Kill(pf.AgentPid, syscall.SIGTERM)
		limit = grace + 5*time.Second
	} else {
		g.signal(syscall.SIGTERM)
	}
	gone := func() bool {
		return (!agentAlive || !liveProcess(pf.AgentPid, pf.AgentStart)) && (!groupAlive || !g.alive())
	}
	ctxErr := waitUntil(ctx, gone, limit)
	if !gone() {
		// No orphans: what ignored SIGTERM, and an agent that hangs,
		// are killed, even when the caller gave up waiting.
		if agentAlive && liveProcess(pf.AgentPid, pf.AgentStart) {
			_ = syscall.Kill(pf.AgentPid, syscall.SIGKILL)
		}
		if groupAlive {
			g.signal(syscall.SIGKILL)
		}
		for i := 0; i < 100 && !gone(); i++ {
			time.Sleep(pollEvery)
		}
	}
	what := pf.describe()
	if ctxErr != nil {
		return "", fmt.Errorf("stop %s: %w", what, ctxErr)
	}
	if !gone() {
		return "", fmt.Errorf("stop %s: processes survive SIGKILL", what)
	}
	return "stopped " + what, nil
}

// waitUntil polls done every pollEvery until it holds or limit passes
// (nil), or ctx ends (its error).
func waitUntil(ctx context.Context, done func() bool, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !done() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// describe names the group pf records for the messages of StopLeftover:
// its pgid, command, job and start.
func (pf *Pidfile) describe() string {
	what := "leftover group " + fmt.Sprint(pf.Pgid) + " (" + strings.Join(pf.Argv, " ") + ")"
	if pf.Job != "" {
		what += " from job " + pf.Job
	}
	if !pf.Started.IsZero() {
		what += " started " + pf.Started.UTC().Format(time.RFC3339)
	}
	return what
}

// isAgent reports whether pid is a live drover agent (its command line
// mentions "agent"), started at start when that is known.
func isAgent(pid int, start uint64) bool {
	if !liveProcess(pid, start) {
		return false
	}
	argv := cmdline(pid)
	if argv == nil {
		// No /proc (not Linux): the start time cannot be checked either;
		// trust a live pid only if we cannot tell.
		return start == 0
	}
	return slices.Contains(argv, "agent")
}

// ownsGroup reports whether pf.Pgid still is the group the agent created.
// While its leader (the command) lives, the leader must be the recorded
// process. Once the leader is gone, the group id stays reserved by the
// kernel for as long as any member lives, so members are ours.
func ownsGroup(pf *Pidfile) bool {
	if pf.ChildPid != pf.Pgid {
		return false
	}
	if liveProcess(pf.ChildPid, 0) {
		if pf.ChildStart != 0 {
			return liveProcess(pf.ChildPid, pf.ChildStart)
		}
		if argv := cmdline(pf.ChildPid); argv != nil {
			return slices.Equal(argv, pf.Argv)
		}
	}
	return true
}
