package setup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/logstream"
)

// StampFile is where a host keeps the stamp of its last successful setup,
// relative to the workdir, inside drover's own state directory that no push
// touches.
const StampFile = ".drover/setup.json"

// stopGrace is how long a setup stopped by Ctrl-C or its timeout has
// between SIGTERM and SIGKILL, and killWait how long its exit is waited
// for after SIGKILL.
const (
	stopGrace = 10 * time.Second
	killWait  = 10 * time.Second
)

// tailLines is how many of a failed setup's last output lines its error
// carries.
const tailLines = 15

// Host is one host to set up, over a connection the caller holds.
type Host struct {
	Name string
	T    cluster.Transport
	FS   cluster.FS
	// Workdir is the job's workdir on the host, absolute.
	Workdir string
	// Env is [job.env] with [host.env] over it.
	Env map[string]string
}

// Options are what every host's setup shares.
type Options struct {
	// Lines are the job's setup lines, Keys its setup_key files, Timeout
	// its setup_timeout (0: config.DefaultSetupTimeout's 30 minutes).
	Lines   []string
	Keys    []string
	Timeout time.Duration
	// Force runs setup whatever the stamps say.
	Force bool
	// Out receives the output as "[setup@HOST] ..." lines; nil discards.
	Out io.Writer
	// LogDir, when set, receives each host's whole output as
	// setup-HOST.log.
	LogDir string
	// Note is told each host's decision before it acts on it (events).
	Note func(host string, d Decision)
}

// Result is what one host's setup did.
type Result struct {
	Host string
	Decision
	Err error
}

// Error is a host's failed setup: its exit status (or the error that kept
// it from running) and the last lines of its output.
type Error struct {
	Host string
	// Code is the exit status; -1 when it did not exit (lost connection,
	// no workdir).
	Code int
	Tail []string
	// Log is the file that holds the whole output; "" when none.
	Log string
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Code >= 0 {
		fmt.Fprintf(&b, "setup on %s exited %d", e.Host, e.Code)
	} else {
		fmt.Fprintf(&b, "setup on %s failed: %v", e.Host, e.Err)
	}
	if len(e.Tail) > 0 {
		b.WriteString("; its last lines:")
		for _, l := range e.Tail {
			b.WriteString("\n  " + cluster.Escape(l))
		}
	}
	b.WriteString("\n  fix the setup lines (or what they install) and run again; try them with `drover setup JOB.toml --hosts " + e.Host + "`")
	if e.Log != "" {
		b.WriteString("; the whole output is in " + e.Log)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Run sets up every host at once and waits for all of them: a host whose
// stamp says its environment is current skips (Decide). The error joins
// every failed host's *Error, in the order of hosts; nil when all are
// set up.
func Run(ctx context.Context, hosts []Host, opts Options) ([]Result, error) {
	sink := logstream.NewSink(discardIfNil(opts.Out))
	res := make([]Result, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = runOne(ctx, h, opts, sink)
		}()
	}
	wg.Wait()
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return res, errors.Join(errs...)
}

// runOne gathers h's stamp and what it would record now, decides, and runs
// the lines when the decision says so.
func runOne(ctx context.Context, h Host, opts Options, sink *logstream.Sink) Result {
	r := Result{Host: h.Name}
	want, err := current(ctx, h, opts)
	if err != nil {
		r.Err = &Error{Host: h.Name, Code: -1, Err: err}
		return r
	}
	r.Decision = Decide(readStamp(h), want, opts.Force)
	if opts.Note != nil {
		opts.Note(h.Name, r.Decision)
	}
	if !r.Run {
		return r
	}
	// A setup stopped half-way leaves an environment its old stamp no
	// longer describes.
	if err := h.FS.Remove(path.Join(h.Workdir, StampFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.Err = &Error{Host: h.Name, Code: -1, Err: fmt.Errorf("remove %s: %w", StampFile, err)}
		return r
	}
	if r.Err = execute(ctx, h, opts, sink); r.Err == nil {
		r.Err = writeStamp(h, want)
	}
	return r
}

// current is the stamp h would record now: the lines, its setup_key
// files' digests and its architecture. `uname -m` runs in the workdir, so
// a missing workdir fails here, before anything ran.
func current(ctx context.Context, h Host, opts Options) (Stamp, error) {
	s := Stamp{Lines: opts.Lines, Keys: map[string]string{}}
	// A host's answer is bounded (an architecture is a word): one that
	// prints without end is stopped at the bound.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := cluster.NewHeadBuffer(archLimit, cancel)
	p, err := h.T.Start(ctx, cluster.Cmd{Args: []string{"uname", "-m"}, Dir: h.Workdir, Stdout: out, Stderr: out})
	if err == nil {
		err = p.Wait()
	}
	if oerr := out.Overflow(h.T.Host().Name, "uname -m"); oerr != nil {
		err = oerr // stopped at the bound: say so, not that it was stopped
	}
	if err != nil {
		return s, fmt.Errorf("uname -m in %s: %w (%s); a new host needs its code first: drover push JOB.toml",
			h.Workdir, err, strings.TrimSpace(out.Quote(archLimit)))
	}
	s.Arch = strings.TrimSpace(string(out.Bytes()))
	for _, k := range opts.Keys {
		d, err := digest(h.FS, path.Join(h.Workdir, k), keyLimit)
		if err != nil {
			return s, fmt.Errorf("hash setup_key file %s: %w", k, err)
		}
		s.Keys[k] = d
	}
	return s, nil
}

// archLimit bounds what drover reads of a host's `uname -m`; keyLimit
// bounds a setup_key file it hashes there (a lock file is kilobytes: a
// host serving one without end, a FIFO or /dev/zero under its name, must
// not hold the run).
const (
	archLimit = 256
	keyLimit  = 256 << 20
)

// digest is the SHA-256 of the file at p, hex, or Absent; a file longer
// than limit is an error.
func digest(fsys cluster.FS, p string, limit int64) (string, error) {
	f, err := fsys.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Absent, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	hash := sha256.New()
	n, err := io.Copy(hash, io.LimitReader(f, limit+1))
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", fmt.Errorf("longer than %d bytes: a setup_key file is a lock or requirements file; name a smaller one", limit)
	}
	return hex.EncodeToString(hash.Sum(nil)), nil
}

// readStamp is h's stamp; nil when there is none or it does not parse
// (setup runs again, which is always safe).
func readStamp(h Host) *Stamp {
	f, err := h.FS.Open(path.Join(h.Workdir, StampFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	var s Stamp
	if json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&s) != nil {
		return nil
	}
	return &s
}

// writeStamp records s on h, atomically: a half-written stamp must not
// read as a different setup.
func writeStamp(h Host, s Stamp) error {
	b, err := json.Marshal(s)
	if err == nil {
		err = h.FS.MkdirAll(path.Join(h.Workdir, path.Dir(StampFile)), 0o755)
	}
	final := path.Join(h.Workdir, StampFile)
	tmp := final + ".tmp"
	var w io.WriteCloser
	if err == nil {
		w, err = h.FS.Create(tmp)
	}
	if err == nil {
		_, err = w.Write(append(b, '\n'))
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = h.FS.Rename(tmp, final)
	}
	if err != nil {
		return &Error{Host: h.Name, Code: -1, Err: fmt.Errorf("record the setup in %s: %w", final, err)}
	}
	return nil
}

// execute runs the lines on h in its workdir, under the timeout, its
// output to the terminal, the log file and the tail an error shows.
func execute(ctx context.Context, h Host, opts Options, sink *logstream.Sink) error {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	tail := &tailWriter{}
	var tee io.Writer = tail
	var logPath string
	if opts.LogDir != "" {
		logPath = filepath.Join(opts.LogDir, "setup-"+h.Name+".log")
		if f, err := os.Create(logPath); err == nil {
			defer f.Close()
			tee = io.MultiWriter(f, tail)
		} else {
			logPath = ""
		}
	}
	// One writer per stream: the transport copies them concurrently
	// (stderr only has what the login shell says before the lines run).
	prefix := "[setup@" + h.Name + "] "
	stdout, stderr := logstream.NewTeeWriter(sink, prefix, tee), logstream.NewTeeWriter(sink, prefix, tee)
	// set -e: the lines run in order and the first that fails ends the
	// setup with its status. One stream keeps the lines in the order
	// they were written, which the tail of a failure relies on.
	cmd := cluster.Cmd{Shell: "exec 2>&1\nset -e\n" + strings.Join(opts.Lines, "\n"), Env: h.Env, Dir: h.Workdir, Stdout: stdout, Stderr: stderr}
	p, err := h.T.Start(context.WithoutCancel(ctx), cmd)
	if err == nil {
		err = wait(ctx, p, timeout)
	}
	stdout.Close()
	stderr.Close()
	if err == nil {
		return nil
	}
	fail := &Error{Host: h.Name, Code: -1, Tail: tail.lines, Log: logPath, Err: err}
	if ee := (*cluster.ExitError)(nil); errors.As(err, &ee) {
		fail.Code = ee.Code
	}
	return fail
}

// errTimeout is a setup stopped at setup_timeout.
var errTimeout = errors.New("setup_timeout passed")

// wait waits for p; when ctx ends or timeout passes first it stops p's
// process group (SIGTERM, SIGKILL after stopGrace) and waits for the exit
// at most killWait more.
func wait(ctx context.Context, p cluster.Process, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		why = context.Cause(ctx)
	case <-timer.C:
		why = fmt.Errorf("%w (%s)", errTimeout, timeout)
	}
	_ = p.Signal(syscall.SIGTERM)
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-done:
		return why
	case <-grace.C:
	}
	_ = p.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(killWait):
	}
	return why
}

// tailWriter keeps the last tailLines lines written to it (each Write is
// one line: logstream's tee).
type tailWriter struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, strings.TrimRight(string(p), "\n"))
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
	return len(p), nil
}

func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
