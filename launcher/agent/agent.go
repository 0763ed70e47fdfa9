// Package agent is what drover runs on a host (`drover agent ...`): first
// the supervisor that guarantees "no orphans, ever". drover never starts a training process on a host
// directly: it starts `drover agent run -- CMD...` over the transport, and
// the agent starts CMD in a process group of its own, copies its output,
// and stops the whole group whenever the controller goes away.
//
// The protocol between drover and an agent is the agent's stdin (the SSH
// channel), one line per request:
//
//	stop   graceful stop: SIGTERM to the group, SIGKILL what is left after the grace
//	kill   SIGKILL to the group at once (also escalates a graceful stop)
//	stacks ask every Python process of the group for its stack (see dumpStacks); no stop
//	ping   (or any other line) proves the controller is alive (see RunOptions.Heartbeat)
//
// End of input or a read error (the channel closed because drover exited,
// was SIGKILLed or lost its connection) is a graceful stop, and so is
// SIGTERM, SIGHUP or SIGINT to the agent itself (ctx in Run). When CMD exits
// on its own, whatever it left in its group (grandchildren) is stopped the
// same way, and the agent exits with CMD's status: its exit code, or
// 128+signal when a signal killed it (137 for SIGKILL), as a shell reports.
//
// With --container NAME (CMD is podman's or docker's run command), a
// graceful stop is the runtime's `stop -t GRACE NAME` rather than SIGTERM
// to the group, and the container is removed by name whenever the agent
// ends (container.go).
//
// A detached run (`agent run --state FILE`, see detach.go) is the
// exception: its agent leaves the channel's session, end of input only
// detaches the attach client that takes the channel's place, and the group
// runs on until it ends, is stopped, or no supervisor attached for
// --controller-timeout.
//
// Run with Subreaper (Linux; the CLI sets it), the agent also adopts
// descendants that left the group (setsid, double fork) and stops them too.
// CMD dies with the agent (a parent-death signal), so that an agent
// killed outright leaves at most what CMD started in its group, which
// `drover agent stop` finds through the pidfile.
//
// With --env-stdin the first line on stdin, before any control line, is
// CMD's environment as a JSON object (EnvLine): the rank's variables are
// set on CMD's exec only, never in the agent's own environment. With
// --watch-workers the agent reports, one line each (WorkerExit.Line), the
// exit of every child of CMD that carries a RANK (torchrun's workers), and
// the first abnormal one stops the group and becomes the agent's status.
//
// # The rest of the agent
//
// Besides run, the agent stops leftovers (StopLeftover), checks a host
// before an attempt (Preflight), prints its version (Version, which the
// installer compares after an upload) and reads the host's GPUs
// (WriteProbe), and takes the live processes' Python stacks (Stacks,
// stacks.go). Each subcommand is owned here whole (commands.go): CLI
// declares its flags and reads them, Command, StopCommand,
// PreflightCommand, ProbeCommand and SFTPCommand build the argv the
// controller sends from the same names, and UsageLine prints its usage
// from its flags; cmd/drover only mounts CLI. `agent version` is the
// exception: remote's install script runs it, in the shell, beside the
// upload. The
// controller's side (choosing, uploading and calling the agent) is the
// sub-package remote.
//
// # NVML in a static agent
//
// Agents are static executables so that they run on any Linux. A static
// process cannot dlopen libnvidia-ml.so.1, so an agent built by
// scripts/build-agent carries a small dynamically linked NVML reader
// (cmd/drover-nvml) appended to it (ReaderFooter). `agent probe` runs it
// from memory (memfd, nothing written) when the host has the loader it
// names, which every host with an NVIDIA driver has. Without a loader the
// host cannot have a driver, and a static binary without a reader (a
// plain CGO_ENABLED=0 `go build`) says so in the report's reason; either
// way the controller falls back to nvidia-smi. A cgo build is dynamic
// already and loads NVML in process.
package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster/sigclean"
	"github.com/droverhq/drover/launcher/gpulease"
)

// MessagePrefix starts every line the agent itself writes into the
// command's stderr and log, so that readers of that stream (the root-cause
// finder) can tell the agent's words from the command's.
const MessagePrefix = "drover agent: "

// DefaultGrace is the time between SIGTERM and SIGKILL when none is given;
// it matches the job file's default stop_grace.
const DefaultGrace = 10 * time.Second

// Exit statuses the agent uses for its own failures, as a shell would.
const (
	// ExitNotFound: CMD does not exist or is not on PATH.
	ExitNotFound = 127
	// ExitCannotRun: CMD exists but could not be executed (permissions,
	// bad format) or the agent failed before starting it.
	ExitCannotRun = 126
)

// pollEvery is how often the agent looks at its process group while it
// waits for it to empty; short enough that a stop is not visibly delayed.
const pollEvery = 50 * time.Millisecond

// outputDrainLimit bounds how long the agent waits, once the group is gone,
// for the output pipes to reach end of file: a process that escaped the
// group (setsid, without Subreaper) may hold them open forever.
const outputDrainLimit = 2 * time.Second

// RunOptions says what `drover agent run` runs and how it stops it. The
// first group of fields travels on the command line (see Command); the
// second is for the process that calls Run.
type RunOptions struct {
	// Args is the command and its arguments; Args[0] is looked up on PATH
	// when it has no slash.
	Args []string
	// Grace is how long the group gets between SIGTERM and SIGKILL
	// (DefaultGrace when zero).
	Grace time.Duration
	// PIDFile, when set, receives a JSON Pidfile while the command runs, so
	// that a later drover can find and stop a group an earlier one left
	// (StopLeftover); it is removed when the agent exits.
	PIDFile string
	// ErrorFile, when set, is the command's TORCHELASTIC_ERROR_FILE: its
	// directory is created and a stale file from an earlier run removed
	// before the command starts, as torchrun's agent does, because torch's
	// @record writes it only into an existing directory and a leftover
	// would be read as this run's root cause.
	ErrorFile string
	// LogFile, when set, receives every byte of the command's stdout and
	// stderr (appended), so that output survives the controller's death.
	LogFile string
	// Job is the job's name, recorded in the pidfile for messages.
	Job string
	// EnvFromStdin makes the agent read the command's environment from the
	// first line of Stdin (EnvLine) before anything else, so that the
	// rank's variables are set only on the command's exec, never in the
	// agent's own environ (see EnvLine).
	EnvFromStdin bool
	// WatchWorkers makes the agent watch the command's children (the
	// workers torchrun starts) and report each one's exit the moment it
	// happens (WorkerExit): the first that dies abnormally ends the run
	// as that worker's failure, whatever torchrun does about it (torch
	// 1.13's torchrun waits up to 300 s in its exit barrier).
	WatchWorkers bool
	// Heartbeat, when positive, makes the agent stop the group gracefully
	// when no line at all arrived on stdin for that long. It is the only
	// way an agent can notice a controller behind a dead network link: sshd
	// keeps such a channel open until TCP gives up, which takes hours
	// unless the server sets ClientAliveInterval.
	Heartbeat time.Duration

	// Env is added over the agent's own environment for the command (and
	// EnvFromStdin's line over it).
	Env map[string]string
	// Stdin carries the control lines; nil means no controller (only
	// signals, ctx and the command's own exit end the run).
	Stdin io.Reader
	// Stdout and Stderr receive the command's output unchanged; nil
	// discards it (the log file still gets it).
	Stdout, Stderr io.Writer
	// Subreaper makes the calling process adopt orphaned descendants
	// (Linux PR_SET_CHILD_SUBREAPER) and reap any child, so that processes
	// which left the group are found and stopped too. Only for a process
	// that has no children besides the command: the CLI.
	Subreaper bool
	// WatchParent makes the run stop gracefully when the calling process's
	// parent (the sshd session) goes away, even if stdin stays open.
	WatchParent bool

	// State, when set, makes this a detached run (see detach.go): the
	// state record's path. Stdin then carries no control lines (unless
	// Attached).
	State string
	// Record, for a run on the channel (no State), is where the agent
	// keeps the same record of its process (see runRecorded): drover
	// reads it when the channel closed without the exit status, so that
	// a clean exit is never taken for a lost host.
	Record string
	// RunID, Attempt, Rank and Name identify the process in State (or
	// Record).
	RunID         string
	Attempt, Rank int
	Name          string
	// ControllerTimeout, for a detached run, stops the group after that
	// long with no attach client (0: never).
	ControllerTimeout time.Duration
	// Attached, with State, records the process in State (and the host's
	// index) as a detached agent does, but supervises it here, on the
	// controller's channel, as a foreground agent: control lines on
	// stdin, the heartbeat, the parent watch. A foreground run's agents
	// are so, so that `drover status`, `logs`, `stop` and `ps` find its
	// processes as they find a detached run's; they still stop with
	// their controller.
	Attached bool
	// HealthFile, when set, makes the agent run the host's GPU health
	// watch (WatchHealth) beside the command, every HealthEvery, writing
	// to this file; drover asks it of one process per host.
	HealthFile  string
	HealthEvery time.Duration
	// GPULeases are the lease files of the GPUs the command uses
	// (package gpulease): the agent holds them for as long as it runs,
	// so that a lease lives as long as the group, also when the
	// gpu-lease agent that took it is gone.
	GPULeases []string
	// Container, when set, is the name of the container the command
	// runs (docker's or podman's run command, ContainerRuntime's): a
	// graceful stop stops it by name with the grace, and it is removed
	// when the agent ends (container.go).
	Container        string
	ContainerRuntime string
}

// Command returns the argv that runs `drover agent run` with o's command-line
// fields, binary being the drover binary on the host, with the flags runCLI
// declares (commands.go), so the launcher never writes them by hand.
func Command(binary string, o RunOptions) []string {
	args := []string{binary, cmdAgent, cmdRun}
	if o.Grace > 0 {
		args = append(args, "--"+flagGrace, o.Grace.String())
	}
	if o.Heartbeat > 0 {
		args = append(args, "--"+flagHeartbeat, o.Heartbeat.String())
	}
	if o.PIDFile != "" {
		args = append(args, "--"+flagPidfile, o.PIDFile)
	}
	if o.LogFile != "" {
		args = append(args, "--"+flagLog, o.LogFile)
	}
	if o.Job != "" {
		args = append(args, "--"+flagJob, o.Job)
	}
	args = append(args, detachedArgs(o)...)
	args = append(args, recordArgs(o)...)
	if o.State != "" && o.Attached {
		args = append(args, "--"+flagAttached)
	}
	if o.EnvFromStdin {
		args = append(args, "--"+flagEnvStdin)
	}
	if o.WatchWorkers {
		args = append(args, "--"+flagWatchWorkers)
	}
	if o.HealthFile != "" {
		args = append(args, "--"+flagHealthFile, o.HealthFile, "--"+flagHealthEvery, o.HealthEvery.String())
	}
	for _, l := range o.GPULeases {
		args = append(args, "--"+flagGPULease, l)
	}
	if o.Container != "" {
		args = append(args, "--"+flagContainer, o.Container, "--"+flagContainerRuntime, o.ContainerRuntime)
	}
	args = append(args, "--")
	return append(args, o.Args...)
}

// StopCommand returns the argv of `drover agent stop` for pidfile, which
// stops a leftover group (see StopLeftover) and prints what it stopped.
func StopCommand(binary, pidfile string, grace time.Duration) []string {
	args := []string{binary, cmdAgent, cmdStop, "--" + flagPidfile, pidfile}
	if grace > 0 {
		args = append(args, "--"+flagGrace, grace.String())
	}
	return args
}

// stopKind orders the ways a run can be asked to end: a later, stronger
// request escalates an earlier one, never the reverse.
type stopKind int

const (
	noStop stopKind = iota
	gracefulStop
	killStop
	// dumpStacks is no stop: it asks for the stacks (see dumpStacks).
	dumpStacks
)

// request is one reason to stop, from stdin, a signal, the heartbeat or
// the parent watch.
type request struct {
	kind stopKind
	why  string
}

// Run runs opts.Args under supervision until it exits or is stopped, and
// returns the status the agent should exit with (see the package doc).
// Cancelling ctx is a graceful stop. err is non-nil only when the command
// could not be started or supervised; exitCode is then ExitNotFound or
// ExitCannotRun.
func Run(ctx context.Context, opts RunOptions) (exitCode int, err error) {
	if len(opts.Args) == 0 || opts.Args[0] == "" {
		return ExitCannotRun, errors.New("agent run: no command given")
	}
	for _, l := range opts.GPULeases {
		f, err := gpulease.Join(l)
		if err != nil {
			return ExitCannotRun, fmt.Errorf("agent run: %w", err)
		}
		defer f.Close()
	}
	if opts.State != "" {
		return runDetached(ctx, opts)
	}
	if opts.Record != "" {
		return runRecorded(ctx, opts)
	}
	code, _, err := run(ctx, opts, nil)
	return code, err
}

// runRecorded is Run for an agent on the channel that keeps a record of
// its process (Record): a State written as starting before anything can
// fail, and with the command's end before the agent exits, so before sshd
// can report the exit or lose it. A record that cannot be written does not
// stop the run: it is drover's second source, the channel its first.
func runRecorded(ctx context.Context, opts RunOptions) (int, error) {
	st := State{RunID: opts.RunID, Job: opts.Job, Attempt: opts.Attempt, Rank: opts.Rank, Name: opts.Name,
		AgentPid: os.Getpid(), AgentStart: startTicks(os.Getpid()), State: ProcStarting,
		Log: opts.LogFile, Started: time.Now().UTC(), Version: Version()}
	_ = writeJSON(opts.Record, st)
	code, stopped, err := run(ctx, opts, nil)
	st.State, st.Exit, st.Ended = ProcExited, &code, time.Now().UTC()
	switch {
	case err != nil:
		st.State, st.Error = ProcFailed, err.Error()
	case stopped:
		st.State = ProcStopped
	}
	_ = writeJSON(opts.Record, st)
	return code, err
}

// runDetached is Run for a detached agent (or an Attached one): the same
// supervision, recorded in the state file from before the start to the
// end.
func runDetached(ctx context.Context, opts RunOptions) (int, error) {
	det, err := newDetached(opts)
	if err != nil {
		return ExitCannotRun, err
	}
	if !opts.Attached {
		// Its stdin is the launcher's pipe (the command's environment,
		// if any), never control lines: see Launch.
		opts.WatchParent = false
	}
	code, stopped, err := run(ctx, opts, det)
	switch {
	case err != nil:
		det.end(ProcFailed, code, err)
	case stopped:
		det.end(ProcStopped, code, nil)
	default:
		det.end(ProcExited, code, nil)
	}
	return code, err
}

// run supervises opts.Args (see Run); det, when set, is the detached
// run's record. stopped says a stop was asked for before the command
// exited.
func run(ctx context.Context, opts RunOptions, det *detached) (exitCode int, stopped bool, err error) {
	s := &supervision{opts: opts, grace: opts.Grace, stdout: orDiscard(opts.Stdout), stderr: orDiscard(opts.Stderr)}
	if s.grace <= 0 {
		s.grace = DefaultGrace
	}

	// A write to a closed SSH channel must not kill the agent (Go turns
	// EPIPE on fds 1 and 2 into death by SIGPIPE unless SIGPIPE is
	// notified): the group would be orphaned. Handled, not ignored, so
	// that the command still gets the default disposition across exec.
	pipeSig := make(chan os.Signal, 1)
	signal.Notify(pipeSig, syscall.SIGPIPE)
	defer signal.Stop(pipeSig)

	if err := s.readEnv(); err != nil {
		return ExitCannotRun, false, fmt.Errorf("agent run: %w", err)
	}
	closeLog, err := s.openLog()
	if err != nil {
		return ExitCannotRun, false, err
	}
	defer closeLog()
	if err := prepareErrorFile(s.opts.ErrorFile); err != nil {
		return ExitCannotRun, false, fmt.Errorf("agent run: %w", err)
	}
	if opts.Subreaper {
		if err := becomeSubreaper(); err != nil {
			return ExitCannotRun, false, fmt.Errorf("agent run: %w", err)
		}
	}
	parent := os.Getppid()
	// The command is forked from a thread that lives as long as Run, so
	// that its parent-death signal fires when the agent dies, not when
	// Go happens to retire the thread that forked it.
	forker := newLockedThread()
	defer forker.stop()
	var cleanup func()
	var code int
	forker.run(func() { cleanup, code, err = s.start() })
	if err != nil {
		return code, false, err
	}
	defer cleanup()
	defer s.watchHealth()()

	exited := make(chan int, 1)
	go func() { exited <- waitChild(s.child, opts.Subreaper, s.g.helpers) }()
	// done releases the request goroutines once Run has returned.
	done := make(chan struct{})
	defer close(done)
	reqs := make(chan request)
	if s.stdin != nil && (det == nil || opts.Attached) {
		go readControl(s.stdin, reqs, opts.Heartbeat, done)
	}
	if opts.WatchParent {
		go watchParent(parent, reqs, done)
	}
	if det != nil {
		det.running(s.child)
		go detachedSignals(reqs, done)
		if !opts.Attached {
			go watchSupervisor(det.path, opts.ControllerTimeout, reqs, done)
		}
	}
	var workers <-chan WorkerExit
	if opts.WatchWorkers {
		workers = watchWorkers(s.child, done)
	}
	status := s.waitCommand(ctx, exited, reqs, workers)
	stopped = s.state != noStop
	s.stopLeftBehind(reqs)
	s.drain()
	s.removeContainer()
	if s.failed != nil {
		// The worker's death is the run's failure, not how torchrun
		// took being stopped.
		return s.failed.Status, stopped, nil
	}
	return status, stopped, nil
}

// readEnv settles the command's environment: opts.Env, then the line on
// stdin when EnvFromStdin; the error file defaults to the command's
// TORCHELASTIC_ERROR_FILE.
func (s *supervision) readEnv() error {
	env := map[string]string{}
	for k, v := range s.opts.Env {
		env[k] = v
	}
	if s.opts.Stdin != nil {
		br := bufio.NewReader(s.opts.Stdin)
		s.stdin = br
		if s.opts.EnvFromStdin {
			got, err := readEnvLine(br)
			if err != nil {
				return err
			}
			for k, v := range got {
				env[k] = v
			}
		}
	}
	if s.opts.ErrorFile == "" {
		s.opts.ErrorFile = env["TORCHELASTIC_ERROR_FILE"]
	}
	if f := env[progressFileEnv]; f != "" {
		// Made here, where it costs nothing, rather than by the
		// controller over SFTP: that was two round trips before every
		// start of every attempt.
		if err := os.MkdirAll(filepath.Dir(f), privateDir); err != nil {
			return fmt.Errorf("agent run: create the directory of %s: %w", progressFileEnv, err)
		}
	}
	if f := env[flightRecEnv]; f != "" {
		// PyTorch's flight recorder writes its dumps there and makes no
		// directory; a failure is torch's to report, not a reason to
		// refuse the start.
		_ = os.MkdirAll(filepath.Dir(f), privateDir)
	}
	if err := writeStacksHook(env); err != nil {
		return err
	}
	s.environ = childEnviron(env)
	return nil
}

// progressFileEnv names the file whose touch counts as progress
// (hang_timeout, drover top's step); the agent makes its directory before
// the command starts, so a process may touch it at once.
const progressFileEnv = "DROVER_PROGRESS_FILE"

// flightRecEnv is the prefix of PyTorch's flight recorder's dump files
// (package plan sets it under the workdir's .drover; a job may set its
// own): the agent makes its directory before the command starts.
const flightRecEnv = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"

// supervision is one Run's command and its process group: how far a stop
// has gone, and where notices go.
type supervision struct {
	opts           RunOptions
	grace          time.Duration
	stdout, stderr io.Writer
	logw           *lockedWriter // nil without a log file

	stdin   io.Reader // opts.Stdin, buffered past the environment's line
	environ []string  // the command's environment
	// failed is the first worker that died abnormally (WatchWorkers).
	failed *WorkerExit
	// ctr is the command's container, nil without one (container.go).
	ctr *containerCtl

	child      int
	g          group
	outR, errR io.ReadCloser
	copiers    sync.WaitGroup

	state  stopKind
	killAt <-chan time.Time
	ctxEnd <-chan struct{} // ctx.Done() until acted on
}

// openLog opens the log file (appending) when there is one.
func (s *supervision) openLog() (closeLog func(), err error) {
	if s.opts.LogFile == "" {
		return func() {}, nil
	}
	// The login user's only (see privateDir): a process's output is
	// nobody else's business on a shared host.
	if err := os.MkdirAll(filepath.Dir(s.opts.LogFile), privateDir); err != nil {
		return nil, fmt.Errorf("agent run: create log directory: %w", err)
	}
	f, err := os.OpenFile(s.opts.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, privateFile)
	if err != nil {
		return nil, fmt.Errorf("agent run: open log: %w", err)
	}
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	// The time index beside it (see timeindex.go) is what --since cuts by.
	ix := newTimeIndex(s.opts.LogFile, size)
	lw := &lockedWriter{w: f, ix: ix}
	s.logw = lw
	return func() {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		f.Close()
		ix.close()
	}, nil
}

// notice writes one of the agent's own lines to stderr and the log.
func (s *supervision) notice(format string, args ...any) {
	msg := fmt.Sprintf(MessagePrefix+format+"\n", args...)
	_, _ = io.WriteString(s.stderr, msg)
	if s.logw != nil {
		_, _ = io.WriteString(s.logw, msg)
	}
}

// start starts the command held before exec, copies its output, records
// it in the pidfile and only then lets it run. cleanup removes the
// pidfile once Run is done.
func (s *supervision) start() (cleanup func(), code int, err error) {
	child, outR, errR, release, err := start(s.opts.Args, s.environ)
	if err != nil {
		code := ExitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = ExitNotFound
		}
		return nil, code, fmt.Errorf("agent run: start %s: %w", s.opts.Args[0], err)
	}
	s.child, s.outR, s.errR = child, outR, errR
	s.g = group{pgid: child, root: 0, helpers: newHelpers()}
	s.ctr = newContainerCtl(s.opts, s.environ, s.g.helpers)
	if s.opts.Subreaper {
		s.g.root = os.Getpid()
	}
	started := time.Now()
	// Output: the log first (it must get every byte even when the channel
	// is gone or stalled), then the channel, whose errors are ignored.
	s.copiers.Add(2)
	go func() { defer s.copiers.Done(); copyOut(outR, s.stdout, s.logw) }()
	go func() { defer s.copiers.Done(); copyOut(errR, s.stderr, s.logw) }()

	cleanup = func() {}
	if s.opts.PIDFile != "" {
		pf := Pidfile{
			AgentPid: os.Getpid(), AgentStart: startTicks(os.Getpid()),
			ChildPid: child, ChildStart: startTicks(child), Pgid: child,
			Job: s.opts.Job, Argv: s.opts.Args, Started: started.UTC().Truncate(time.Second),
		}
		if err := writePidfile(s.opts.PIDFile, pf); err != nil {
			// Without a pidfile a later drover cannot find this group
			// should the agent die; refuse rather than run unaccounted.
			release(false)
			_ = syscall.Kill(-child, syscall.SIGKILL)
			waitChild(child, s.opts.Subreaper, s.g.helpers)
			return nil, ExitCannotRun, fmt.Errorf("agent run: %w", err)
		}
		cleanup = func() { removePidfile(s.opts.PIDFile, os.Getpid()) }
	}
	// Recorded (or nothing to record): the command may run now.
	release(true)
	return cleanup, 0, nil
}

// escalate acts on a request: a stack dump, or a stop that goes further
// than the one under way (SIGTERM, then SIGKILL after the grace).
func (s *supervision) escalate(r request) {
	if r.kind == dumpStacks {
		s.g.dumpStacks(s.notice, s.environ)
		return
	}
	if r.kind <= s.state {
		return
	}
	s.state = r.kind
	switch r.kind {
	case gracefulStop:
		if s.logw != nil {
			_, _ = fmt.Fprintf(s.logw, MessagePrefix+"%s: stopping process group %d (SIGTERM, SIGKILL after %s)\n", r.why, s.child, s.grace)
		}
		if s.ctr != nil {
			// The runtime kills inside the container after the grace;
			// the group's SIGKILL is the backstop should it not.
			s.killAt = time.After(s.grace + ContainerStopSlack)
			s.stopContainer()
			return
		}
		s.killAt = time.After(s.grace)
		s.g.signal(syscall.SIGTERM)
		// A stopped (SIGSTOPped, frozen) process only acts on
		// SIGTERM once continued.
		s.g.signal(syscall.SIGCONT)
	case killStop:
		if s.logw != nil {
			_, _ = fmt.Fprintf(s.logw, MessagePrefix+"%s: killing process group %d\n", r.why, s.child)
		}
		s.g.signal(syscall.SIGKILL)
		s.killAt = nil
	}
}

// graceExpired kills what is still running once the grace after SIGTERM
// is over; what names it in the notice.
func (s *supervision) graceExpired(what string) {
	s.notice("%s still running %s after SIGTERM: sending SIGKILL", what, s.grace)
	s.escalate(request{killStop, "grace expired"})
}

// waitCommand waits until the command itself exits, acting on requests,
// ctx and the grace meanwhile, and returns its status.
func (s *supervision) waitCommand(ctx context.Context, exited <-chan int, reqs <-chan request, workers <-chan WorkerExit) int {
	s.ctxEnd = ctx.Done()
	for {
		select {
		case status := <-exited:
			return status
		case w := <-workers:
			s.workerExited(w)
		case r := <-reqs:
			s.escalate(r)
		case <-s.ctxEnd:
			s.ctxEnd = nil
			s.escalate(request{gracefulStop, "signalled"})
		case <-s.killAt:
			s.graceExpired(fmt.Sprintf("process group %d", s.child))
		}
	}
}

// stopLeftBehind gives what the command left behind (grandchildren,
// adopted orphans) the same treatment, on the same clock if a stop was
// already under way, until none is left.
func (s *supervision) stopLeftBehind(reqs <-chan request) {
	if !s.g.alive() {
		return
	}
	if s.state == noStop {
		s.notice("command exited; stopping processes it left in group %d", s.child)
		s.escalate(request{gracefulStop, "command exited"})
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for s.g.alive() {
		select {
		case <-tick.C:
			s.g.reap()
		case r := <-reqs:
			s.escalate(r)
		case <-s.ctxEnd:
			s.ctxEnd = nil
			s.escalate(request{gracefulStop, "signalled"})
		case <-s.killAt:
			s.graceExpired(fmt.Sprintf("processes of group %d", s.child))
		}
		if s.state == killStop {
			// SIGKILL cannot be ignored; keep signalling in case
			// something forked between the scan and the kill.
			s.g.signal(syscall.SIGKILL)
		}
	}
	s.g.reap()
}

// drain waits until every byte the group wrote is copied (it is all in the
// pipes once the group is gone), for at most outputDrainLimit.
func (s *supervision) drain() {
	drained := make(chan struct{})
	go func() { s.copiers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrainLimit):
		s.outR.Close()
		s.errR.Close()
	}
}

// pySpyWait bounds one py-spy dump. The agent's loop waits for it (a stop
// that arrives meanwhile waits too, so that it does not cut the dump
// short); drover waits stackDumpWait before it asks for the stop.
const pySpyWait = 5 * time.Second

// pySpyDump is pid's Python stack from the py-spy at bin, as the line to
// log, and whether py-spy succeeded (else the line says how it failed).
func (h *helpers) pySpyDump(bin string, pid int) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), pySpyWait)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "dump", "--pid", strconv.Itoa(pid))
	cmd.Stdout, cmd.Stderr = &out, &out
	err := h.start(cmd)
	if err == nil {
		err = cmd.Wait()
		h.done(cmd.Process.Pid)
	}
	text := strings.TrimRight(out.String(), "\n")
	if err != nil {
		return fmt.Sprintf("group hung: py-spy dump --pid %d failed (%v): %s", pid, err, text), false
	}
	return fmt.Sprintf("group hung: stack of Python process %d (py-spy):\n%s", pid, text), true
}

// gateScript holds the child until the agent has recorded it: it waits for
// a line on fd 3, closes it and execs the command (same pid, same start
// time, so the pidfile stays true). If the agent dies first, the pipe ends
// without a line and the command never runs.
const gateScript = `IFS= read -r _ <&3 || exit 126; exec 3<&-; exec "$@"`

// start starts args in a new process group whose output goes to two pipes,
// held at the gate until release is called (or closed without it, which
// ends the child before the command runs).
// The child's stdin is /dev/null: the agent's stdin is the control channel.
func start(args, environ []string) (pid int, outR, errR *os.File, release func(bool), err error) {
	// Resolve the program now: behind the gate a missing one would only
	// show as sh's exit 127, not as an error the agent can name.
	if _, err := lookPath(args[0], environ); err != nil {
		return 0, nil, nil, nil, err
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, nil, fmt.Errorf("create gate pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		gateR.Close()
		gateW.Close()
		return 0, nil, nil, nil, fmt.Errorf("create stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		gateR.Close()
		gateW.Close()
		outR.Close()
		outW.Close()
		return 0, nil, nil, nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", gateScript, "sh"}, args...)...)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{gateR}
	cmd.Env = environ
	cmd.SysProcAttr = childAttr()
	// The rank gets the signal state sshd gives, whatever this agent
	// inherited (a local host's agent under a nohup'd drover).
	sigclean.Command(cmd)
	err = cmd.Start()
	gateR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		gateW.Close()
		outR.Close()
		errR.Close()
		return 0, nil, nil, nil, err
	}
	pid = cmd.Process.Pid
	// The agent waits with wait4 itself (it may reap adopted orphans too),
	// so os.Process must not hold on to the child.
	_ = cmd.Process.Release()
	release = func(run bool) {
		if run {
			_, _ = gateW.Write([]byte("go\n"))
		}
		gateW.Close()
	}
	return pid, outR, errR, release, nil
}

// waitChild waits for pid and returns its status the way a shell reports
// it. As a subreaper it reaps any child but the helpers, so adopted
// orphans do not pile up as zombies, until pid is among them.
func waitChild(pid int, anyChild bool, h *helpers) int {
	for {
		var ws syscall.WaitStatus
		var got int
		var err error
		if anyChild {
			got, ws, err = h.reapOne(true)
		} else {
			got, err = syscall.Wait4(pid, &ws, 0, nil)
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// ECHILD: someone else reaped it; nothing to report.
			return ExitCannotRun
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// readControl turns stdin lines into stop requests. End of input is a
// graceful stop: the controller is gone. With a heartbeat, silence is too.
func readControl(r io.Reader, reqs chan<- request, heartbeat time.Duration, done <-chan struct{}) {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	send := func(r request) bool {
		select {
		case reqs <- r:
			return true
		case <-done:
			return false
		}
	}
	var silent *time.Timer
	var silence <-chan time.Time
	if heartbeat > 0 {
		silent = time.NewTimer(heartbeat)
		defer silent.Stop()
		silence = silent.C
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				send(request{gracefulStop, "control channel closed"})
				return
			}
			if silent != nil {
				silent.Reset(heartbeat)
			}
			switch strings.TrimSpace(line) {
			case "stop":
				ok = send(request{gracefulStop, "stop requested"})
			case "kill":
				ok = send(request{killStop, "kill requested"})
			case "stacks":
				ok = send(request{dumpStacks, "stacks requested"})
			}
			if !ok {
				return
			}
		case <-silence:
			if !send(request{gracefulStop, "no heartbeat for " + heartbeat.String()}) {
				return
			}
			// Keep reading: a later "kill" must still escalate.
			silence = nil
		}
	}
}

// watchParent reports a graceful stop when the agent's parent changes
// (it died and the agent was reparented), polling once a second.
func watchParent(parent int, reqs chan<- request, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if os.Getppid() != parent {
				select {
				case reqs <- request{gracefulStop, "parent process " + strconv.Itoa(parent) + " exited"}:
				case <-done:
				}
				return
			}
		}
	}
}

// copyOut copies the command's output to the log (first) and to out until
// the pipe closes. A failing out (closed channel) stops only that copy.
func copyOut(r io.Reader, out io.Writer, logw *lockedWriter) {
	buf := make([]byte, 32<<10)
	outOK := true
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if logw != nil {
				_, _ = logw.Write(buf[:n])
			}
			if outOK {
				if _, werr := out.Write(buf[:n]); werr != nil {
					outOK = false
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// lockedWriter serialises the two output copies onto one log file so that
// each read chunk lands whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
	// ix, when set, learns the time and offset of every write.
	ix *timeIndex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ix == nil {
		return l.w.Write(p)
	}
	l.ix.before(time.Now())
	n, err := l.w.Write(p)
	l.ix.size += int64(n)
	return n, err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// privateDir and privateFile are the modes of what the agent creates
// under a workdir's .drover (logs, error files, pidfiles): the login
// user's only. On a shared host the other users would otherwise read every
// process's output and tracebacks (paths, hostnames, sometimes secrets).
const (
	privateDir  = 0o700
	privateFile = 0o600
)

// prepareErrorFile makes room for a fresh TORCHELASTIC_ERROR_FILE at path
// (see RunOptions.ErrorFile). A relative path is the command's business.
func prepareErrorFile(path string) error {
	if path == "" || !filepath.IsAbs(path) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), privateDir); err != nil {
		return fmt.Errorf("create directory for the error file: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale error file: %w", err)
	}
	return nil
}
