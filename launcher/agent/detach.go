package agent

// # Detached runs
//
// A detached run (`drover run -d`) must outlive the drover that started it:
// its laptop sleeps, its Wi-Fi changes, its SSH session ends. So its agent
// must not hang on the SSH channel. `drover agent run --state FILE ...`
// starts a second copy of itself in a session of its own (setsid, stdio
// not tied to the channel) that supervises the command exactly as a
// foreground agent does, and records on the host, where any drover can
// find it:
//
//   - the command's output in the log file (--log), append-only: a reader
//     resumes at a byte offset, so no line is lost or doubled;
//   - a small state record (State, the --state file): run id, attempt,
//     rank, pids, state, exit status;
//   - an index entry ~/.drover/live/<run>.<process> (a link to the state
//     record) while it runs, so that `drover ps --inventory` finds every
//     live run on a host whoever started it.
//
// The copy on the channel then becomes an attach client (Attach), the same
// one `drover agent attach` runs for a supervisor that comes back: it
// streams the log from an offset and turns the control lines of the
// package doc into signals to the detached agent (stop: SIGTERM, kill:
// SIGUSR1, stacks: SIGUSR2), and touches the state's .beat file for each
// line, which is how the detached agent knows a supervisor is there. End
// of input only detaches: the group runs on. With --controller-timeout the
// agent stops its group after that long without a beat; without, it keeps
// it until it ends or is stopped.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster/sigclean"
)

// State is what a detached agent records about its process.
type State struct {
	RunID      string    `json:"run_id"`
	Job        string    `json:"job,omitempty"`
	Attempt    int       `json:"attempt"`
	Rank       int       `json:"rank"`
	Name       string    `json:"name"`
	AgentPid   int       `json:"agent_pid"`
	AgentStart uint64    `json:"agent_start_ticks,omitempty"`
	Pid        int       `json:"pid,omitempty"`
	State      ProcState `json:"state"`
	Exit       *int      `json:"exit,omitempty"`
	Error      string    `json:"error,omitempty"`
	Log        string    `json:"log"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	// Version is the agent's (Version), so that a run outliving an
	// upgrade says which drover keeps each process.
	Version string `json:"version"`
}

// Final reports whether the record will not change any more.
func (st *State) Final() bool {
	return st.State.Final()
}

// writeJSON writes v to path atomically (temporary file and rename).
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory of %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadState reads a state record.
func ReadState(path string) (*State, error) {
	data, err := readRegular(path, maxStateFile)
	if err != nil {
		return nil, fmt.Errorf("read run state: %w", err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parse run state %s: %w", path, err)
	}
	return &st, nil
}

// beatFile is where attach clients show that a supervisor is there.
func beatFile(state string) string { return state + ".beat" }

// touch sets path's modification time to now, creating it if needed.
func touch(path string) {
	now := time.Now()
	if os.Chtimes(path, now, now) != nil {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			f.Close()
		}
	}
}

// IndexDir is where a host keeps one entry per live detached process,
// relative to the login user's home.
const IndexDir = ".drover/live"

// indexEntry is this process's entry in the host's index.
func (st *State) indexEntry() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, IndexDir, st.RunID+"."+st.Name)
}

// detached is what a detached agent keeps of its record while it runs.
type detached struct {
	path string
	st   State
}

// newDetached records the agent as starting, before anything can fail, so
// that the attach client waiting for the record learns why it did.
func newDetached(o RunOptions) (*detached, error) {
	d := &detached{path: o.State, st: State{
		RunID: o.RunID, Job: o.Job, Attempt: o.Attempt, Rank: o.Rank, Name: o.Name,
		AgentPid: os.Getpid(), AgentStart: startTicks(os.Getpid()), State: ProcStarting,
		Log: o.LogFile, Started: time.Now().UTC(), Version: Version(),
	}}
	if err := writeJSON(d.path, d.st); err != nil {
		return nil, fmt.Errorf("agent run: %w", err)
	}
	touch(beatFile(d.path))
	return d, nil
}

// running adds the index entry and records the started command, in that
// order (see end): a reader that sees the record say running finds the
// entry. The entry is made under a temporary name and renamed into
// place, so that a reader never finds it missing or half made.
func (d *detached) running(pid int) {
	if e := d.st.indexEntry(); e != "" {
		_ = os.MkdirAll(filepath.Dir(e), 0o700)
		abs, _ := filepath.Abs(d.path)
		tmp := filepath.Join(filepath.Dir(e), fmt.Sprintf(".%s.tmp-%d", filepath.Base(e), os.Getpid()))
		_ = os.Remove(tmp)
		if os.Symlink(abs, tmp) == nil && os.Rename(tmp, e) != nil {
			_ = os.Remove(tmp)
		}
	}
	d.st.Pid, d.st.State = pid, ProcRunning
	_ = writeJSON(d.path, d.st)
}

// end removes the index entry and records how the run ended, in that
// order: a reader that sees the final record (an attach client returns
// on it) must find the entry gone; the other order left it for a moment
// after the record said the process ended.
func (d *detached) end(state ProcState, code int, err error) {
	if e := d.st.indexEntry(); e != "" {
		_ = os.Remove(e)
	}
	d.st.State, d.st.Exit, d.st.Ended = state, &code, time.Now().UTC()
	if err != nil {
		d.st.Error = err.Error()
	}
	_ = writeJSON(d.path, d.st)
}

// detachedSignals turns the signals an attach client (or `drover stop`)
// sends a detached agent into requests: SIGUSR1 kills, SIGUSR2 asks for
// stacks (SIGTERM is the graceful stop, through ctx).
func detachedSignals(reqs chan<- request, done <-chan struct{}) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			r := request{killStop, "kill requested"}
			if s == syscall.SIGUSR2 {
				r = request{dumpStacks, "stacks requested"}
			}
			select {
			case reqs <- r:
			case <-done:
				return
			}
		}
	}
}

// timeoutFile is where an attach client sets the controller timeout (see
// AttachOptions.SetControllerTimeout).
func timeoutFile(state string) string { return state + ".timeout" }

// currentTimeout is the controller timeout in force: the one an attach
// client set last, else the one the agent was started with.
func currentTimeout(state string, started time.Duration) time.Duration {
	b, err := os.ReadFile(timeoutFile(state))
	if err != nil {
		return started
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return started
	}
	return d
}

// watchSupervisor stops the group gracefully once no attach client has
// touched the beat file for the controller timeout in force (see
// RunOptions.ControllerTimeout, currentTimeout; 0: never).
func watchSupervisor(state string, started time.Duration, reqs chan<- request, done <-chan struct{}) {
	beat := beatFile(state)
	every := time.Second
	if started > 0 {
		every = min(every, started/2+time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			timeout := currentTimeout(state, started)
			if timeout <= 0 {
				continue
			}
			fi, err := os.Stat(beat)
			if err == nil && time.Since(fi.ModTime()) < timeout {
				continue
			}
			select {
			case reqs <- request{gracefulStop, "no supervisor for " + timeout.String() + " (controller_timeout)"}:
			case <-done:
			}
			return
		}
	}
}

// launchPoll is how often the launcher looks at the detached agent's record
// while it starts, and an attach client at the log and the record.
const launchPoll = 50 * time.Millisecond

// Launch is `drover agent run --state FILE` on the channel: it starts the
// detached agent (argv with --detached-child, in a session of its own),
// waits until it has started the command or failed, and then attaches to
// it (Attach from offset 0). It returns the status to exit with.
func Launch(ctx context.Context, argv []string, o RunOptions, stdin io.Reader, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "agent run: find own binary: %v\n", err)
		return ExitCannotRun
	}
	_ = os.Remove(o.State)
	br := bufio.NewReader(stdin)
	env, err := launchEnv(o, br)
	if err != nil {
		fmt.Fprintf(stderr, "agent run: %v\n", err)
		return ExitCannotRun
	}
	child := append([]string{argv[0], argv[1], argv[2], "--" + flagDetachedChild}, argv[3:]...)
	cmd := exec.Command(self, child[1:]...)
	if env != nil {
		cmd.Stdin = bytes.NewReader(env)
	}
	var errOut strings.Builder
	cmd.Stderr = &limitedWriter{w: &errOut, n: 16 << 10}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	sigclean.Command(cmd) // default signal state, whatever this agent inherited
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "agent run: start detached agent: %v\n", err)
		return ExitCannotRun
	}
	if code, ok := waitStarted(ctx, cmd, o.State, &errOut, stderr); !ok {
		return code
	}
	return Attach(ctx, AttachOptions{State: o.State, Heartbeat: o.Heartbeat}, br, stdout)
}

// launchEnv is what the detached agent gets on its stdin from the
// launcher (nil: nothing): the first line of br when the controller sends
// the command's environment there (--env-stdin). The rest of br is
// control lines, for the attach client.
func launchEnv(o RunOptions, br *bufio.Reader) ([]byte, error) {
	if !o.EnvFromStdin {
		return nil, nil
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("read the command's environment from stdin: %w", err)
	}
	return line, nil
}

// waitStarted waits until the detached agent cmd has recorded in state
// that it started the command (ok), or failed to (its status, said on
// stderr).
func waitStarted(ctx context.Context, cmd *exec.Cmd, state string, errOut fmt.Stringer, stderr io.Writer) (int, bool) {
	exited := make(chan int, 1)
	go func() { _ = cmd.Wait(); exited <- cmd.ProcessState.ExitCode() }()
	started := func() (int, bool, bool) {
		st, err := ReadState(state)
		if err != nil || st.AgentPid != cmd.Process.Pid || st.State == ProcStarting {
			return 0, false, false
		}
		if st.State == ProcFailed && st.Exit != nil {
			fmt.Fprintf(stderr, "%s\n", st.Error)
			return *st.Exit, true, false
		}
		return 0, true, true
	}
	for {
		if code, known, ok := started(); known {
			return code, ok
		}
		select {
		case code := <-exited:
			if code, known, ok := started(); known {
				return code, ok
			}
			fmt.Fprintf(stderr, "agent run: the detached agent exited %d before it started the command: %s\n", code, strings.TrimSpace(errOut.String()))
			return max(code, ExitCannotRun), false
		case <-ctx.Done():
			return ExitDetached, false
		case <-time.After(launchPoll):
		}
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(p))
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// AttachOptions says which detached process to attach to.
type AttachOptions struct {
	// State is the process's state record.
	State string
	// From is the byte offset in its log to stream from.
	From int64
	// Heartbeat, when positive, detaches once no control line arrived for
	// that long (the controller is behind a dead link).
	Heartbeat time.Duration
	// SetControllerTimeout makes the agent keep the group for
	// ControllerTimeout (0: for ever) with no attach client from now on,
	// whatever it was started with: the attaching supervisor's promise
	// (a foreground one's is a few seconds) replaces the starter's.
	SetControllerTimeout bool
	ControllerTimeout    time.Duration
}

// Attach streams the log of the detached process at o.State to stdout
// from o.From, and turns stdin's control lines into signals to its agent,
// until the process has ended and its log is copied (its exit status is
// returned) or the controller goes (ExitDetached: the group runs on).
func Attach(ctx context.Context, o AttachOptions, stdin io.Reader, stdout io.Writer) int {
	st, err := ReadState(o.State)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent attach: %v\n", err)
		return ExitCannotRun
	}
	beat := beatFile(o.State)
	touch(beat)
	if o.SetControllerTimeout {
		// After the beat: a stale beat must not meet a short timeout.
		if err := os.WriteFile(timeoutFile(o.State), []byte(o.ControllerTimeout.String()+"\n"), 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "agent attach: set the controller timeout: %v\n", err)
			return ExitCannotRun
		}
	}
	gone := make(chan struct{})
	if stdin != nil {
		go attachControl(stdin, st, beat, o.Heartbeat, gone)
	}
	f, err := os.Open(st.Log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent attach: open log: %v\n", err)
		return ExitCannotRun
	}
	defer f.Close()
	if _, err := f.Seek(o.From, io.SeekStart); err != nil {
		fmt.Fprintf(os.Stderr, "agent attach: seek log %s to %d: %v\n", st.Log, o.From, err)
		return ExitCannotRun
	}
	buf := make([]byte, 64<<10)
	for {
		// The record first: once it is final every byte is in the log.
		cur, rerr := ReadState(o.State)
		final := rerr == nil && cur.Final()
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if _, werr := stdout.Write(buf[:n]); werr != nil {
					return ExitDetached
				}
			}
			if err != nil || n == 0 {
				break
			}
		}
		if final {
			if cur.Exit != nil {
				return *cur.Exit
			}
			return ExitCannotRun
		}
		if rerr == nil && agentGone(o.State, cur) {
			// Killed (OOM, kill -9): what its command left is a
			// leftover for the next attempt's preflight (the pidfile).
			// Reported as a SIGKILL.
			fmt.Fprintf(stdout, "%sthe detached agent (pid %d) died without recording how its command ended\n", MessagePrefix, cur.AgentPid)
			return 128 + int(syscall.SIGKILL)
		}
		select {
		case <-gone:
			return ExitDetached
		case <-ctx.Done():
			return ExitDetached
		case <-time.After(launchPoll):
		}
	}
}

// agentGone reports whether the agent of the record cur (read from state)
// died before recording an end: it is not running, and the record, read
// again after looking, is still not final.
func agentGone(state string, cur *State) bool {
	if isAgent(cur.AgentPid, cur.AgentStart) {
		return false
	}
	again, err := ReadState(state)
	return err == nil && !again.Final()
}

// attachControl reads control lines and signals the agent of st; every
// line is a beat. It closes gone at end of input or after heartbeat of
// silence.
func attachControl(r io.Reader, st *State, beat string, heartbeat time.Duration, gone chan<- struct{}) {
	defer close(gone)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var silence <-chan time.Time
	for {
		if heartbeat > 0 {
			silence = time.After(heartbeat)
		}
		select {
		case line, ok := <-lines:
			if !ok {
				return
			}
			touch(beat)
			sig := map[string]syscall.Signal{"stop": syscall.SIGTERM, "kill": syscall.SIGUSR1, "stacks": syscall.SIGUSR2}[strings.TrimSpace(line)]
			if sig != 0 && isAgent(st.AgentPid, st.AgentStart) {
				_ = syscall.Kill(st.AgentPid, sig)
			}
		case <-silence:
			return
		}
	}
}

// detachedArgs are the flags of a detached `agent run` (see Command).
func detachedArgs(o RunOptions) []string {
	if o.State == "" {
		return nil
	}
	args := []string{"--" + flagState, o.State, "--" + flagRunID, o.RunID,
		"--" + flagAttempt, fmt.Sprint(o.Attempt), "--" + flagRank, fmt.Sprint(o.Rank), "--" + flagName, o.Name}
	if o.ControllerTimeout > 0 {
		args = append(args, "--"+flagControllerTimeout, o.ControllerTimeout.String())
	}
	return args
}

// recordArgs are the flags of an `agent run` on the channel that keeps a
// record of its process (RunOptions.Record; see Command).
func recordArgs(o RunOptions) []string {
	if o.State != "" || o.Record == "" {
		return nil
	}
	return []string{"--" + flagRecord, o.Record, "--" + flagRunID, o.RunID,
		"--" + flagAttempt, fmt.Sprint(o.Attempt), "--" + flagRank, fmt.Sprint(o.Rank), "--" + flagName, o.Name}
}

// AttachCommand returns the argv of `drover agent attach` for o.
func AttachCommand(binary string, o AttachOptions) []string {
	args := []string{binary, cmdAgent, cmdAttach, "--" + flagState, o.State, "--" + flagFrom, fmt.Sprint(o.From)}
	if o.Heartbeat > 0 {
		args = append(args, "--"+flagHeartbeat, o.Heartbeat.String())
	}
	if o.SetControllerTimeout {
		args = append(args, "--"+flagControllerTimeout, o.ControllerTimeout.String())
	}
	return args
}

// RunsCommand returns the argv of `drover agent runs`: the newest run (or
// runID) of workdir, or with workdir "" every live run in the host's index.
func RunsCommand(binary, workdir, runID string) []string {
	args := []string{binary, cmdAgent, cmdRuns}
	if workdir != "" {
		args = append(args, "--"+flagWorkdir, workdir)
	}
	if runID != "" {
		args = append(args, "--"+flagRunID, runID)
	}
	return args
}

// Paths of a detached run in a workdir, relative to it: RunsDir holds one
// directory per run (RunDir) and CurrentRun, a link naming the newest.
const (
	RunsDir    = ".drover/runs"
	CurrentRun = RunsDir + "/current"
	// RunRecordFile and StopFile are in a run's directory.
	RunRecordFile = "run.json"
	StopFile      = "stop"
	leaseFile     = ".drover/lease"
)

// RunDir is run id's directory, relative to the workdir.
func RunDir(id string) string { return RunsDir + "/" + id }

// ProcessFiles are the state record and log of one process of an
// attempt, relative to the workdir.
func ProcessFiles(id string, attempt int, name string) (state, log string) {
	dir := fmt.Sprintf("%s/attempt-%d/%s", RunDir(id), attempt, name)
	return dir + ".json", dir + ".log"
}

// RunRecord is what the supervisor of a run (detached or not) keeps in
// its directory on every host (RunRecordFile): the run as a whole.
type RunRecord struct {
	RunID    string   `json:"run_id"`
	Job      string   `json:"job"`
	State    RunState `json:"state"`
	Attempt  int      `json:"attempt"`
	Restarts int      `json:"restarts"`
	// Checkpoint names the newest checkpoint drover knows of ("" none).
	Checkpoint     string `json:"checkpoint"`
	SupervisorHost string `json:"supervisor_host"`
	SupervisorPid  int    `json:"supervisor_pid"`
	// SupervisorVersion is the supervising drover's version (Version).
	SupervisorVersion string    `json:"supervisor_version"`
	Hosts             []string  `json:"hosts"`
	Started           time.Time `json:"started"`
	Updated           time.Time `json:"updated"`
	// Foreground says the group runs under foreground agents (`drover
	// run` without -d): they stop with its supervisor, so a run whose
	// supervisor is gone is over, and no other drover adopts it.
	Foreground bool `json:"foreground,omitempty"`
	// Stragglers are the events that name the ranks the straggler watch
	// of attempt StragglersAttempt holds far slower than their peers
	// (package launcher/straggler); they stand for that attempt only.
	Stragglers        []string `json:"stragglers,omitempty"`
	StragglersAttempt int      `json:"stragglers_attempt,omitempty"`
	// Queue says, per host, where a queued run (RunQueued) waits for
	// GPUs and who holds them; empty once it holds them.
	Queue map[string]string `json:"queue,omitempty"`
	// Reason says why a run that never started ended (a --queue run
	// that waited --queue-timeout).
	Reason string `json:"reason,omitempty"`
}

// ProcReport is one process as a host sees it now.
type ProcReport struct {
	State
	// Alive says its agent still runs (a record that says running with a
	// dead agent was left by a killed agent).
	Alive bool `json:"alive"`
	// LastOutputAgeS is how long ago its log last grew, in seconds.
	LastOutputAgeS float64 `json:"last_output_age_s"`
	LogSize        int64   `json:"log_size"`
	StateFile      string  `json:"state_file"`
}

// HostReport is `drover agent runs`'s answer.
type HostReport struct {
	Run *RunRecord `json:"run,omitempty"`
	// Lease is the workdir's lease as read (its owner's JSON) and how
	// long ago it was renewed, by this host's clock.
	Lease     string       `json:"lease,omitempty"`
	LeaseAgeS float64      `json:"lease_age_s,omitempty"`
	StopAsked string       `json:"stop_asked,omitempty"`
	Processes []ProcReport `json:"processes"`
}

// Report reads what the host knows of workdir's newest run (or runID),
// or with workdir "" of every live run in the host's index.
func Report(workdir, runID string) (*HostReport, error) {
	rep := &HostReport{Processes: []ProcReport{}}
	if workdir == "" {
		return rep, rep.fromIndex()
	}
	if runID == "" {
		id, err := os.Readlink(filepath.Join(workdir, CurrentRun))
		if errors.Is(err, fs.ErrNotExist) {
			return rep, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the newest run of %s: %w", workdir, err)
		}
		runID = id
	}
	data, err := os.ReadFile(filepath.Join(workdir, RunDir(runID), RunRecordFile))
	if err != nil {
		return nil, fmt.Errorf("read run %s in %s: %w", runID, workdir, err)
	}
	rep.Run = &RunRecord{}
	if err := json.Unmarshal(data, rep.Run); err != nil {
		return nil, fmt.Errorf("parse run %s in %s: %w", runID, workdir, err)
	}
	if l, err := os.Readlink(filepath.Join(workdir, leaseFile)); err == nil {
		rep.Lease = l
		if fi, err := os.Lstat(filepath.Join(workdir, leaseFile)); err == nil {
			rep.LeaseAgeS = time.Since(fi.ModTime()).Seconds()
		}
	}
	if b, err := os.ReadFile(filepath.Join(workdir, RunDir(runID), StopFile)); err == nil {
		rep.StopAsked = strings.TrimSpace(string(b))
	}
	states, _ := filepath.Glob(filepath.Join(workdir, RunDir(runID), fmt.Sprintf("attempt-%d", rep.Run.Attempt), "*.json"))
	for _, p := range states {
		if pr, ok := readProc(p); ok {
			rep.Processes = append(rep.Processes, pr)
		}
	}
	return rep, nil
}

// fromIndex fills rep from the host's index, dropping entries whose
// process is gone. At most maxIndexEntries are looked at, and each
// record an entry names is read as readRegular reads: bounded, regular
// files only, never blocking.
func (rep *HostReport) fromIndex() error {
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("find the home directory: %w", err)
	}
	entries, _ := filepath.Glob(filepath.Join(home, IndexDir, "*"))
	if len(entries) > maxIndexEntries {
		entries = entries[:maxIndexEntries]
	}
	for _, e := range entries {
		if strings.HasPrefix(filepath.Base(e), ".") {
			continue // an entry being made (running)
		}
		target, err := os.Readlink(e)
		if err != nil {
			continue
		}
		pr, ok := readProc(target)
		if !ok || !pr.Alive {
			_ = os.Remove(e)
			continue
		}
		rep.Processes = append(rep.Processes, pr)
	}
	return nil
}

// readProc reads one state record and looks at its agent and log.
func readProc(path string) (ProcReport, bool) {
	st, err := ReadState(path)
	if err != nil {
		return ProcReport{}, false
	}
	pr := ProcReport{State: *st, StateFile: path, Alive: isAgent(st.AgentPid, st.AgentStart)}
	if fi, err := os.Stat(st.Log); err == nil {
		pr.LogSize = fi.Size()
		pr.LastOutputAgeS = time.Since(fi.ModTime()).Seconds()
	}
	return pr, true
}
