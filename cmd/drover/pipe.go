package main

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// errStdoutGone is why a run stops when its standard output went away.
var errStdoutGone = errors.New("standard output closed (its reader exited, as `| head` does): stopping every process")

// epipeWriter is drover's standard output for `drover run`: the first
// write that fails with EPIPE (the reader of the pipe went away, as in
// `drover run job.toml | head -1`) calls stop once, and every later write
// is dropped. Go would otherwise end drover with SIGPIPE at that write,
// leaving its processes to notice the missing heartbeat, its leases to go
// stale and no summary in events.log; stop makes it a graceful stop, as
// Ctrl-C does.
type epipeWriter struct {
	w    io.Writer
	stop func()
	once sync.Once
	gone atomic.Bool
}

// watchEPIPE makes a write to a closed pipe an error instead of SIGPIPE
// (process-wide: cmd/drover is the program) and wraps w as epipeWriter.
// SIGPIPE is caught (and dropped), not ignored: an ignored signal stays
// ignored in the processes drover starts on a local host, whose own
// pipelines (`yes | head`) expect to die of it.
func watchEPIPE(w io.Writer, stop func()) io.Writer {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return &epipeWriter{w: w, stop: stop}
}

func (e *epipeWriter) Write(p []byte) (int, error) {
	if e.gone.Load() {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		e.gone.Store(true)
		e.once.Do(e.stop)
		return len(p), nil
	}
	return n, err
}
