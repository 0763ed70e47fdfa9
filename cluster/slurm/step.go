package slurm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The step helper and the transport talk over the step's stderr, the one
// stream srun passes through unchanged: a header line naming the step
// (which Signal needs for scancel) before the command starts, and a trailer
// with the command's wait status after it ended. Both start with a byte no
// text uses, and the transport removes them.
const (
	marker       = "\x1e"
	headerPrefix = marker + "drover-step "
	trailerPref  = marker + "drover-exit "
)

// forwarded are the signals the helper outlives: scancel --signal reaches
// every process of the step, the command's included, so the helper lets
// the command decide and reports how it ended.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM}

// StepMain is the step helper, run by srun on the node as `drover
// slurm-step [--chdir=DIR] -- ARGS`: it announces the step, runs ARGS with the step's
// stdin, stdout and stderr, and reports its exit status or signal on
// stderr. It exits 0 itself, so srun adds no message of its own ("task 0:
// Exited with exit code 5") and its exit status, which cannot tell `exit
// 137` from SIGKILL, is not needed.
func StepMain(args []string, stderr io.Writer) int {
	var dir string
	if len(args) > 0 && strings.HasPrefix(args[0], "--chdir=") {
		dir, args = strings.TrimPrefix(args[0], "--chdir="), args[1:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "drover slurm-step: no command")
		return 2
	}
	fmt.Fprintf(stderr, "%s%s.%s\n", headerPrefix, os.Getenv("SLURM_JOB_ID"), os.Getenv("SLURM_STEP_ID"))
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	go func() {
		for range sigs {
		}
	}()
	if dir != "" {
		if err := os.Chdir(dir); err != nil {
			// As `cd DIR && CMD` over SSH: nothing runs, status 1.
			fmt.Fprintf(stderr, "drover slurm-step: %v\n%s1\n", err, trailerPref)
			return 0
		}
	}
	c := exec.Command(args[0], args[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		fmt.Fprintf(stderr, "%s0\n", trailerPref)
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			fmt.Fprintf(stderr, "%ssignal %d\n", trailerPref, int(ws.Signal()))
		} else {
			fmt.Fprintf(stderr, "%s%d\n", trailerPref, ee.ExitCode())
		}
	default:
		// The command did not start: report it as a shell would.
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(stderr, "drover slurm-step: %v\n%s%d\n", err, trailerPref, code)
	}
	return 0
}

// status is how a step's command ended, from the trailer.
type status struct {
	known  bool
	code   int
	signal syscall.Signal
}

func parseTrailer(line string) (status, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), trailerPref)
	if !ok {
		return status{}, false
	}
	if sig, isSig := strings.CutPrefix(rest, "signal "); isSig {
		n, err := strconv.Atoi(sig)
		if err != nil || n <= 0 || n > 64 {
			return status{}, false
		}
		return status{known: true, code: 128 + n, signal: syscall.Signal(n)}, true
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n > 255 {
		return status{}, false
	}
	return status{known: true, code: n}, true
}

func signalName(sig syscall.Signal) string {
	return strings.TrimPrefix(unix.SignalName(sig), "SIG")
}

// stderrFilter passes the step's stderr through to out, taking out the
// helper's header and trailer. Bytes that might begin a trailer are held
// back until it is clear they do not; nothing else is delayed.
type stderrFilter struct {
	out     io.Writer
	onStep  func(step string)
	header  bool // the header was seen
	pending []byte
	st      status
}

func (f *stderrFilter) Write(p []byte) (int, error) {
	f.pending = append(f.pending, p...)
	if err := f.drain(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// drain writes out what is known not to be protocol; at the end (final)
// everything left is written.
func (f *stderrFilter) drain(final bool) error {
	for len(f.pending) > 0 {
		if !f.header {
			// Before the header only srun speaks, in whole lines.
			nl := strings.IndexByte(string(f.pending), '\n')
			if nl < 0 {
				if final {
					return f.emit(len(f.pending))
				}
				return nil
			}
			line := string(f.pending[:nl])
			if step, ok := strings.CutPrefix(line, headerPrefix); ok {
				f.header = true
				f.pending = f.pending[nl+1:]
				f.onStep(step)
				continue
			}
			if err := f.emit(nl + 1); err != nil {
				return err
			}
			continue
		}
		m := strings.Index(string(f.pending), marker)
		if m < 0 {
			return f.emit(len(f.pending))
		}
		if m > 0 {
			if err := f.emit(m); err != nil {
				return err
			}
			continue
		}
		// pending starts with the marker: a trailer, its beginning, or
		// output that merely contains the byte.
		rest := string(f.pending)
		nl := strings.IndexByte(rest, '\n')
		if nl >= 0 {
			if st, ok := parseTrailer(rest[:nl+1]); ok {
				f.st = st
				f.pending = f.pending[nl+1:]
				continue
			}
		} else if !final && (strings.HasPrefix(trailerPref, rest) || strings.HasPrefix(rest, trailerPref)) {
			return nil // wait for more
		}
		if err := f.emit(1); err != nil {
			return err
		}
	}
	return nil
}

func (f *stderrFilter) emit(n int) error {
	chunk := f.pending[:n]
	f.pending = f.pending[n:]
	if f.out == nil {
		return nil
	}
	_, err := f.out.Write(chunk)
	return err
}
