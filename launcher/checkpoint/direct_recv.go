package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"
)

// maxProving is how many connections a receiver proves at once. Each
// must answer its challenge within proveTimeout, so a stranger's idle
// connections hold a place for that long at most, and the sender's,
// queued in the kernel behind them, is taken next.
const maxProving = 8

// proveTimeout bounds a connection's answer to a receiver's challenge:
// the sender answers in one round trip.
const proveTimeout = 3 * time.Second

// ForwardFailed starts the event a receiver reports when it cannot pass
// the copy on to the next host of its chain: the controller then stops
// waiting for the hosts after it and copies to them another way.
const ForwardFailed = "forward to the next host failed"

// Forward is the next hop of a chain: a receiver forwards every frame it
// reads to the receiver at Addr, which knows Token.
type Forward struct {
	Addr  string
	Token []byte
}

// Receive is what ReceiveDirect does: accept one sender that knows Token
// on Listener, write checkpoint Seq named Name into Own (drover's copy
// area on this host) and forward it to Next when set.
type Receive struct {
	Listener net.Listener
	Token    []byte
	Own      string
	Seq      int
	Name     string
	Next     *Forward
	// Part, for a part of a sharded checkpoint, is the host that wrote
	// it: the copy goes to <Own>/<seq>/parts/<Part> (partDir).
	Part string
	// Wait, when positive, bounds waiting for the sender to connect.
	Wait time.Duration
	// Idle bounds each read from the sender and each write to the next
	// hop (CopyIdle when 0): see idleConn.
	Idle time.Duration
	// Events receives what the controller should hear of (a next hop
	// that could not be reached); the copy here goes on.
	Events func(format string, args ...any)
	// beforeApply, set by tests, runs before each frame is applied to
	// the disk (on the goroutine that applies them).
	beforeApply func(frame byte)
	// writeback, set by tests, replaces startWriteback.
	writeback func(f *os.File, off, n int64)
	// manifestCap, set by tests, replaces maxManifest.
	manifestCap int
}

// ReceiveDirect takes one direct copy (see SendDirect) and returns its
// digest and size once it is renamed into place as <Own>/<seq>/<name>.
// The listener is closed as soon as the sender has proved the token:
// drover listens only for the transfer. Files are written through an
// os.Root at Own, so no name in the stream leads out of it.
func ReceiveDirect(ctx context.Context, o Receive) (string, int64, error) {
	if !fs.ValidPath(o.Name) || strings.Contains(o.Name, "/") || o.Name == "." {
		return "", 0, fmt.Errorf("direct copy: %q is not a checkpoint name", o.Name)
	}
	raw, err := acceptPeer(ctx, o.Listener, o.Token, o.Wait)
	if err != nil {
		return "", 0, err
	}
	defer raw.Close()
	conn := newIdleConn(raw, o.Idle)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := os.MkdirAll(o.Own, 0o700); err != nil {
		return "", 0, fmt.Errorf("direct copy: %w", err)
	}
	root, err := os.OpenRoot(o.Own)
	if err != nil {
		return "", 0, fmt.Errorf("direct copy: %w", err)
	}
	defer root.Close()
	r := &receiver{root: root, tmp: seqDir(o.Seq) + ".tmp", final: seqDir(o.Seq), name: o.Name, events: o.Events, beforeApply: o.beforeApply, conn: conn, writeback: startWriteback, manifestCap: maxManifest}
	if o.manifestCap > 0 {
		r.manifestCap = o.manifestCap
	}
	if o.writeback != nil {
		r.writeback = o.writeback
	}
	if o.Part != "" {
		if !fs.ValidPath(o.Part) || strings.Contains(o.Part, "/") || o.Part == "." {
			return "", 0, fmt.Errorf("direct copy: %q is not a part name", o.Part)
		}
		r.final = path.Join(seqDir(o.Seq), "parts", o.Part)
		r.tmp = r.final + ".tmp"
	}
	if o.Next != nil {
		r.forwardTo(ctx, *o.Next, conn.idle)
	}
	defer r.closeNext()
	stopWaits := sendWaits(conn)
	digest, err := r.run(bufio.NewReaderSize(conn, 256<<10))
	stopWaits()
	if err != nil {
		_ = root.RemoveAll(r.tmp)
		_ = writeFrame(conn, frameFail, []byte(err.Error()))
		if e := ctx.Err(); e != nil {
			err = e
		}
		return "", 0, err
	}
	if err := writeFrame(conn, frameOK, []byte(digest)); err != nil {
		return "", 0, fmt.Errorf("direct copy: answer the sender: %w", err)
	}
	return digest, r.size, nil
}

// sendWaits writes frameWait to the sender every third of its idle
// deadline until the returned func is called (which waits for it to
// stop): the sender, idle while this host fsyncs and renames the copy,
// knows it is alive.
func sendWaits(conn *idleConn) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(conn.idle / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if writeFrame(conn, frameWait, nil) != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// acceptPeer accepts connections until one proves the token, until wait
// (when positive) or ctx ends. Connections are proved concurrently, each
// within proveTimeout (proveReceiverWithin): another user of the host who
// opens idle connections to the new port (it is in /proc/net/tcp) only
// delays the sender by that much, and cannot make the receiver give up
// before the sender came.
func acceptPeer(ctx context.Context, ln net.Listener, token []byte, wait time.Duration) (net.Conn, error) {
	if tl, ok := ln.(*net.TCPListener); ok && wait > 0 {
		_ = tl.SetDeadline(time.Now().Add(wait))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	proven := make(chan net.Conn, 1)
	slots := make(chan struct{}, maxProving)
	var failures atomic.Int64
	var last atomic.Value
	for {
		select {
		case c := <-proven:
			return c, nil
		case slots <- struct{}{}:
		}
		conn, err := ln.Accept()
		if err != nil {
			select {
			case c := <-proven: // proved just as the wait ended
				return c, nil
			default:
			}
			if e := ctx.Err(); e != nil {
				return nil, fmt.Errorf("direct copy: no sender came: %w", e)
			}
			if n := failures.Load(); n > 0 {
				return nil, fmt.Errorf("direct copy: accept: %w (%d connections did not know the token, the last: %v)", err, n, last.Load())
			}
			return nil, fmt.Errorf("direct copy: accept: %w", err)
		}
		go func() {
			defer func() { <-slots }()
			if err := proveReceiverWithin(conn, token, proveTimeout); err != nil {
				failures.Add(1)
				last.Store(err.Error())
				conn.Close()
				return
			}
			select {
			case proven <- conn:
				cancel() // ends Accept: the one sender came
			default:
				conn.Close()
			}
		}()
	}
}

type receiver struct {
	root       *os.Root
	tmp, final string
	name       string
	events     func(format string, args ...any)
	next       net.Conn
	nextW      *bufio.Writer
	f          *os.File
	h          hash.Hash
	n          int64
	rel        string
	rels       []string
	manifest   bytes.Buffer
	// manifestCap bounds manifest (maxManifest): a MANIFEST longer than
	// a sender may send can never arrive, so the copy is refused as soon
	// as the files it lists would need one, and the receiver holds no
	// more of their paths.
	manifestCap int
	size        int64
	// flushed is how much of the file being written the kernel was
	// asked to write to the disk (writeback).
	flushed   int64
	writeback func(f *os.File, off, n int64)
	// conn is the sender's connection: a failure on the disk side ends
	// its reads (wake).
	conn *idleConn
	// beforeApply is Receive.beforeApply.
	beforeApply func(frame byte)
}

// forwardTo connects to the next hop; when it cannot, the copy here goes
// on and the controller copies to that hop another way.
func (r *receiver) forwardTo(ctx context.Context, next Forward, idle time.Duration) {
	raw, err := dialPeer(ctx, next.Addr, next.Token)
	if err != nil {
		var un *UnreachableError
		if errors.As(err, &un) {
			r.event("%s: %s%v", ForwardFailed, Unreachable, err)
		} else {
			r.event("%s: %v", ForwardFailed, err)
		}
		return
	}
	conn := newIdleConn(raw, idle)
	r.next, r.nextW = conn, bufio.NewWriterSize(conn, 256<<10)
}

func (r *receiver) event(format string, args ...any) {
	if r.events != nil {
		r.events(format, args...)
	}
}

// forwardChunk is how much of a frame a hop reads before it passes that
// much on: the chain streams, each hop holding back at most this much
// rather than a whole 1 MiB frame (8 hops at 400 Mbit/s would add 170 ms).
const forwardChunk = 128 << 10

// readForward reads one frame into the buffer pick gives for its type and
// length (capped at maxFrame, so a stream cannot make it allocate more),
// forwarding it to the next hop as it arrives, forwardChunk at a time.
func (r *receiver) readForward(in io.Reader, pick func(t byte, n int) []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(in, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	buf := pick(h[0], int(min(n, maxFrame)))
	if int64(n) > int64(len(buf)) {
		return 0, nil, fmt.Errorf("direct copy: a frame of %d bytes (at most %d)", n, len(buf))
	}
	r.forward(h[:], false)
	p := buf[:n]
	for off := 0; off < len(p); {
		end := min(off+forwardChunk, len(p))
		if _, err := io.ReadFull(in, p[off:end]); err != nil {
			return 0, nil, fmt.Errorf("direct copy: stream cut short: %w", err)
		}
		r.forward(p[off:end], end-off == forwardChunk)
		off = end
	}
	if h[0] == frameManifest {
		r.forward(nil, true)
	}
	return h[0], p, nil
}

// forward passes bytes of the stream on, and with flush everything held
// back (small frames wait for more); a next hop that fails drops out.
func (r *receiver) forward(p []byte, flush bool) {
	if r.nextW == nil {
		return
	}
	_, err := r.nextW.Write(p)
	if err == nil && flush {
		err = r.nextW.Flush()
	}
	if err != nil {
		r.event("%s: %v", ForwardFailed, err)
		r.next.Close()
		r.next, r.nextW = nil, nil
	}
}

// closeNext waits (each read bounded by the idle deadline, through the
// next hop's frameWait) for the next hop's answer, so that the connection
// closes only after it has read everything.
func (r *receiver) closeNext() {
	if r.next == nil {
		return
	}
	_ = readAnswer(r.next, "")
	r.next.Close()
}

// recvDepth is how many data frames (copyBuffer each) a receiver holds
// between reading them and writing them to its disk: the hop forwards
// while it hashes, writes and fsyncs, so a next hop never waits on this
// host's disk, and a receiver's memory stays bounded (recvDepth MiB).
const recvDepth = 8

// writebackChunk is how much of a file a receiver writes before it asks
// the kernel to start writing it to the disk (startWriteback). Left to
// itself, the kernel keeps up to a tenth of the host's memory dirty, and
// the fsync at the end of the file then writes it all while the copy
// waits: tens of GB on a large host, and on every host of a chain at the
// same moment. Written back as it arrives, the disk keeps pace with the
// network and the fsync finds little left.
const writebackChunk = 8 << 20

// inFrame is one frame read and forwarded, waiting to be applied; buf
// goes back to the pool once it is.
type inFrame struct {
	t   byte
	p   []byte
	buf []byte
}

// run reads frames until the MANIFEST and forwards each as it reads it,
// while another goroutine applies them (apply: hash, write, fsync), and
// returns the digest once every file is written and checked.
func (r *receiver) run(in io.Reader) (string, error) {
	if err := r.root.RemoveAll(r.tmp); err != nil {
		return "", err
	}
	if err := r.root.MkdirAll(r.tmp, 0o700); err != nil {
		return "", err
	}
	work, free := make(chan inFrame, recvDepth), make(chan []byte, recvDepth)
	for range recvDepth {
		free <- nil // allocated on first use: a small checkpoint needs few
	}
	applied := make(chan error, 1)
	var failed atomic.Bool
	go func() { applied <- r.applyAll(work, free, &failed) }()
	stop := func(err error) (string, error) {
		close(work)
		if aerr := <-applied; aerr != nil {
			err = aerr // why the disk side stopped, rather than its effect
		}
		r.closeFile()
		return "", err
	}
	for {
		buf := <-free
		if failed.Load() {
			return stop(nil)
		}
		t, p, err := r.readForward(in, func(t byte, n int) []byte {
			if t == frameManifest {
				return make([]byte, min(n, maxManifest))
			}
			if buf == nil {
				buf = make([]byte, copyBuffer)
			}
			return buf
		})
		if err != nil {
			return stop(err)
		}
		if t != frameManifest {
			work <- inFrame{t: t, p: p, buf: buf}
			continue
		}
		close(work)
		if err := <-applied; err != nil {
			r.closeFile()
			return "", err
		}
		return r.finish(p)
	}
}

// applyAll applies every frame of work, giving each buffer back to free;
// after an error it only gives them back, and failed tells run to stop.
func (r *receiver) applyAll(work <-chan inFrame, free chan<- []byte, failed *atomic.Bool) error {
	var err error
	for f := range work {
		if err == nil {
			if r.beforeApply != nil {
				r.beforeApply(f.t)
			}
			if err = r.apply(f.t, f.p); err != nil {
				failed.Store(true)
				if r.conn != nil {
					// Wake run, which may be waiting for a frame
					// that a sender waiting for our answer never sends.
					r.conn.wake()
				}
			}
		}
		free <- f.buf
	}
	return err
}

// closeFile closes the file being written when a copy stops midway.
func (r *receiver) closeFile() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// checkRel refuses a path that is not inside the checkpoint.
func (r *receiver) checkRel(rel string) error {
	if !fs.ValidPath(rel) || (rel != r.name && !strings.HasPrefix(rel, r.name+"/")) {
		return fmt.Errorf("direct copy: %q is not a path inside checkpoint %q", rel, r.name)
	}
	return nil
}

func (r *receiver) apply(t byte, p []byte) error {
	switch t {
	case frameDir:
		if err := r.checkRel(string(p)); err != nil {
			return err
		}
		return r.root.MkdirAll(path.Join(r.tmp, string(p)), 0o700)
	case frameFile:
		if r.f != nil {
			return errors.New("direct copy: a file started before the last one ended")
		}
		if err := r.checkRel(string(p)); err != nil {
			return err
		}
		if r.manifest.Len() >= r.manifestCap {
			return fmt.Errorf("direct copy: the files sent need a MANIFEST of more than %d bytes, more than a sender may send: it can never arrive", r.manifestCap)
		}
		f, err := r.root.OpenFile(path.Join(r.tmp, string(p)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		r.f, r.h, r.n, r.flushed, r.rel = f, sha256.New(), 0, 0, string(p)
		return nil
	case frameData:
		if r.f == nil {
			return errors.New("direct copy: data outside a file")
		}
		r.h.Write(p)
		_, err := r.f.Write(p)
		r.n += int64(len(p))
		if r.n-r.flushed >= writebackChunk {
			r.writeback(r.f, r.flushed, r.n-r.flushed)
			r.flushed = r.n
		}
		return err
	case frameEnd:
		return r.endFile(p)
	}
	return fmt.Errorf("direct copy: unknown frame %q", t)
}

// endFile checks the file's sha256 and starts writing the rest of it to
// the disk; syncFiles waits for that before the MANIFEST.
func (r *receiver) endFile(sum []byte) error {
	if r.f == nil {
		return errors.New("direct copy: a file ended that never started")
	}
	got := r.h.Sum(nil)
	if r.n > r.flushed {
		r.writeback(r.f, r.flushed, r.n-r.flushed)
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return err
	}
	if !bytes.Equal(got, sum) {
		return fmt.Errorf("direct copy: %s arrived with sha256 %x, sent %x", r.rel, got, sum)
	}
	writeManifestLine(&r.manifest, r.rel, r.n, got)
	r.rels = append(r.rels, r.rel)
	r.size += r.n
	return nil
}

// syncFiles fsyncs every file of the copy, once all are written: the
// first fsync commits the filesystem's journal for all of them, where an
// fsync as each file ends costs a commit per file (1,000 for a directory
// of shards) and holds up the copy behind each.
func (r *receiver) syncFiles() error {
	for _, rel := range r.rels {
		f, err := r.root.Open(path.Join(r.tmp, rel))
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("direct copy: fsync %s: %w", rel, err)
		}
	}
	return nil
}

// finish checks the sender's MANIFEST against the one built from what
// arrived, writes it, dates the files before it (see verifyCopy) and
// renames the copy into place.
func (r *receiver) finish(sent []byte) (string, error) {
	if r.f != nil {
		return "", errors.New("direct copy: the MANIFEST came before the last file ended")
	}
	if !bytes.Equal(sent, r.manifest.Bytes()) {
		return "", errors.New("direct copy: the MANIFEST sent does not list what arrived")
	}
	if err := r.syncFiles(); err != nil {
		return "", err
	}
	mp := path.Join(r.tmp, ManifestName)
	f, err := r.root.OpenFile(mp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.Write(sent)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	mi, err := r.root.Stat(mp)
	if err != nil {
		return "", err
	}
	t := truncSecond(mi.ModTime()).Add(-time.Second)
	for _, rel := range r.rels {
		if err := r.root.Chtimes(path.Join(r.tmp, rel), t, t); err != nil {
			return "", err
		}
	}
	if err := r.root.RemoveAll(r.final); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := r.root.Rename(r.tmp, r.final); err != nil {
		return "", err
	}
	sum := sha256.Sum256(sent)
	return hex.EncodeToString(sum[:]), nil
}
