// Package logstream turns the byte streams of many remote processes into
// whole, labelled lines on one terminal (or file) without ever mixing two
// hosts' output inside a line. Remote output arrives in arbitrary chunks
// (SSH packets split lines anywhere), so each stream is buffered until a
// newline and every complete line is written to the shared sink with a
// single Write under the sink's lock.
//
// The pieces compose: a LineWriter cuts a stream into lines and hands each
// to a function, so the run supervisor can send every line both to the
// terminal (prefixed, through a Sink) and to a per-process log file.
package logstream

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// MaxLine bounds how much of a line is buffered: a process printing a
// progress bar with \r and no \n must not grow memory without limit, so a
// longer line is emitted in MaxLine pieces. Through a prefix (a terminal)
// each piece is a line of its own, so that every terminal line says whose
// it is; without one (a log file) the pieces are written back to back and
// the file keeps the line exactly as the process printed it.
const MaxLine = 64 << 10

// maxHeld bounds what a sink holds back from other streams while one
// stream's overlong line is half written (see Sink).
const maxHeld = 1 << 20

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("logstream: write after close")

// Sink is a writer shared by many streams. Each Write reaches the
// underlying writer whole, under a lock, so lines written through it by
// different goroutines never interleave.
//
// A stream writing an overlong line without a prefix leaves the line open
// on the sink between pieces; other streams' lines are held back (up to
// maxHeld bytes) until it ends, so the line stays whole and nobody blocks.
// Past maxHeld, or when a second stream starts an overlong line of its
// own, the open line is ended with a newline first: memory stays bounded
// even for a progress bar that never prints one.
type Sink struct {
	mu sync.Mutex
	w  io.Writer
	// open is the stream whose line is half written, or nil.
	open *LineWriter
	// held is what other streams wrote meanwhile, in order.
	held []byte
}

// NewSink wraps w (typically os.Stdout) for sharing among streams.
func NewSink(w io.Writer) *Sink {
	return &Sink{w: w}
}

// Write writes p to the underlying writer with one call, holding the lock.
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// writeParts writes the concatenation of parts with one Write.
func (s *Sink) writeParts(parts ...[]byte) error {
	_, err := s.Write(bytes.Join(parts, nil))
	return err
}

// writeLine writes one whole line of from's: at once, after from's own
// open line, or held back while another stream's line is open.
func (s *Sink) writeLine(from *LineWriter, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.open == nil:
		_, err := s.w.Write(line)
		return err
	case s.open == from:
		// The end of the open line: it and what waited go out together.
		s.open = nil
		buf := append(append(make([]byte, 0, len(line)+len(s.held)), line...), s.held...)
		s.held = nil
		_, err := s.w.Write(buf)
		return err
	case len(s.held)+len(line) <= maxHeld:
		s.held = append(s.held, line...)
		return nil
	}
	err := s.breakOpenLocked()
	if _, werr := s.w.Write(line); err == nil {
		err = werr
	}
	return err
}

// writePiece writes a piece of from's overlong line, leaving it open.
func (s *Sink) writePiece(from *LineWriter, piece []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.open != nil && s.open != from {
		err = s.breakOpenLocked()
	}
	s.open = from
	if _, werr := s.w.Write(piece); err == nil {
		err = werr
	}
	return err
}

// breakOpenLocked ends the open line with a newline and writes what was
// held back; the open stream's next piece starts a new line.
func (s *Sink) breakOpenLocked() error {
	buf := append([]byte{'\n'}, s.held...)
	s.open, s.held = nil, nil
	_, err := s.w.Write(buf)
	return err
}

// LineWriter cuts what is written to it into lines and calls emit once per
// line, the line including its trailing newline. It is safe for concurrent
// use, though one stream normally has one writer.
type LineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(line []byte) error
	// piece, when set, takes the MaxLine pieces of an overlong line as
	// they are, without a newline; emit then gets the line's end.
	piece  func(p []byte) error
	closed bool
}

// NewLineWriter returns a LineWriter that gives each complete line to
// emit. emit must not keep line after returning; an error from it is
// returned by the Write (or Close) that produced the line.
func NewLineWriter(emit func(line []byte) error) *LineWriter {
	return &LineWriter{emit: emit}
}

// Write buffers p and emits every line it completes. It always consumes
// all of p unless emit fails.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	n := len(p)
	for len(p) > 0 {
		complete := 0
		var chunk []byte
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			chunk, p, complete = p[:i+1], p[i+1:], 1
		} else {
			chunk, p = p, nil
		}
		w.buf = append(w.buf, chunk...)
		// An overlong line goes out in MaxLine pieces. Exactly MaxLine
		// bytes without a newline wait: the next byte may end the line.
		for len(w.buf)-complete > MaxLine {
			if err := w.emitPiece(); err != nil {
				return n - len(p), err
			}
		}
		if complete == 1 {
			line := w.buf
			w.buf = w.buf[:0]
			if err := w.emit(line); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// emitPiece hands the first MaxLine bytes of the buffer on: as a line of
// its own, or as a piece when the writer keeps long lines whole.
func (w *LineWriter) emitPiece() error {
	var err error
	if w.piece != nil {
		err = w.piece(w.buf[:MaxLine])
	} else {
		err = w.emit(append(append([]byte(nil), w.buf[:MaxLine]...), '\n'))
	}
	w.buf = append(w.buf[:0], w.buf[MaxLine:]...)
	return err
}

// Close emits a final unterminated line, with a newline added, so that the
// last words of a crashing process are not lost. Later Writes fail;
// Close is idempotent.
func (w *LineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if len(w.buf) == 0 {
		return nil
	}
	line := append(w.buf, '\n')
	w.buf = nil
	return w.emit(line)
}

// NewPrefixWriter returns a writer whose output reaches sink as whole lines,
// each preceded by prefix (e.g. "[h3] ") and written with one Write. Close
// flushes a final partial line. Without a prefix (a log file), a line
// longer than MaxLine reaches sink whole too, in pieces (see Sink).
func NewPrefixWriter(sink *Sink, prefix string) io.WriteCloser {
	if prefix == "" {
		var w *LineWriter
		w = NewLineWriter(func(line []byte) error { return sink.writeLine(w, line) })
		w.piece = func(p []byte) error { return sink.writePiece(w, p) }
		return w
	}
	return NewTeeWriter(sink, prefix, nil)
}

// NewTeeWriter is NewPrefixWriter that also writes every line, without the
// prefix, to tee (a per-process log file) when tee is not nil. The line
// reaches tee first, so the log file is complete even when the terminal
// write fails.
func NewTeeWriter(sink *Sink, prefix string, tee io.Writer) io.WriteCloser {
	p := []byte(prefix)
	return NewLineWriter(func(line []byte) error {
		var teeErr error
		if tee != nil {
			_, teeErr = tee.Write(line)
		}
		if err := sink.writeParts(p, line); err != nil {
			return err
		}
		return teeErr
	})
}
