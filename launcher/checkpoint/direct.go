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
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/launcher/peerauth"
)

// Direct copies: the host that holds a checkpoint streams it straight to
// the agents of the hosts that should hold it, over the network the job
// itself uses, instead of through the controller (whose link may be a
// laptop's Wi-Fi). The controller only starts the two ends over the SSH
// connections it already trusts and hands each a one-time token on their
// stdin; the ends prove to each other that they know it (an HMAC
// challenge in both directions, so the token never crosses the network
// and a recorded exchange cannot be replayed), then the sender streams
// frames: D (a directory), F (a file starts), C (its data), E (its
// sha256), M (the MANIFEST, last). The receiver hashes what it writes,
// refuses the copy unless every file's sha256 and the MANIFEST it builds
// itself are what the sender sent, and renames <seq>.tmp into place only
// then. A receiver given a next hop forwards every frame as it reads it,
// so staging onto N hosts is one chain whose time does not grow with N.

// Frame types of the direct-copy stream.
const (
	frameDir      = 'D'
	frameFile     = 'F'
	frameData     = 'C'
	frameEnd      = 'E'
	frameManifest = 'M'
	// frameOK and frameFail are the receiver's one answer: the digest of
	// the copy it renamed into place, or why it did not.
	frameOK   = 'K'
	frameFail = 'X'
)

// maxFrame bounds one frame's payload: a data chunk (copyBuffer) or a
// MANIFEST (maxManifest), whichever is larger.
const maxFrame = max(copyBuffer, maxManifest)

// TokenSize is the length of a direct copy's one-time token.
const TokenSize = peerauth.TokenSize

// directDialTimeout bounds connecting to a receiver: a firewall that drops
// packets shows as this timeout, after which drover copies through the
// controller instead.
const directDialTimeout = 5 * time.Second

// handshakeTimeout bounds the token exchange on a connection.
const handshakeTimeout = 10 * time.Second

// CopyIdle is how long either end of a copy stream waits for the other to
// move (a read that returns nothing, a write that takes nothing) before it
// gives up on the copy: a sender stopped (SIGSTOP, a process stuck on a
// failing disk) or a receiver that stopped reading must not hang a restart
// or the next checkpoint's copy. A healthy stream moves a frame (at most
// copyBuffer) far more often, even held to checkpoint_copy_rate: above
// copyBuffer/CopyIdle (about 23 KiB/s).
const CopyIdle = 45 * time.Second

// frameWait is a receiver's "still finishing" while it fsyncs and renames
// a copy after the MANIFEST: the sender's idle deadline then measures the
// receiver's liveness, not how long its disk takes.
const frameWait = 'W'

// idleConn gives every Read and Write of a copy stream its own deadline,
// idle from when it starts: a stream is only as stuck as its last move.
// wake ends a Read in progress (and every later one) at once.
type idleConn struct {
	net.Conn
	idle  time.Duration
	woken atomic.Bool
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	if idle <= 0 {
		idle = CopyIdle
	}
	return &idleConn{Conn: c, idle: idle}
}

func (c *idleConn) Read(p []byte) (int, error) {
	if !c.woken.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	n, err := c.Conn.Read(p)
	return n, c.explain(err)
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(p)
	return n, c.explain(err)
}

// wake makes the Read in progress, and every later one, fail now.
func (c *idleConn) wake() {
	c.woken.Store(true)
	_ = c.Conn.SetReadDeadline(time.Now())
}

// IdleError says the other end of a copy stream did not move for Idle.
type IdleError struct {
	Peer string
	Idle time.Duration
	Err  error
}

func (e *IdleError) Error() string {
	return fmt.Sprintf("direct copy: %s did not move for %s (stopped, or stuck on its disk): %v", e.Peer, e.Idle, e.Err)
}

func (e *IdleError) Unwrap() error { return e.Err }

func (c *idleConn) explain(err error) error {
	var ne net.Error
	if err != nil && !c.woken.Load() && errors.As(err, &ne) && ne.Timeout() {
		return &IdleError{Peer: c.RemoteAddr().String(), Idle: c.idle, Err: err}
	}
	return err
}

// UnreachableError says a sender (or a hop of a chain) could not connect
// to the receiver at Addr at all: a firewall, a route, a host down. Only
// this makes the controller copy between the pair through itself from
// then on; a copy that failed later (a handshake, a stream) tries the
// direct path again at the next checkpoint.
type UnreachableError struct {
	Addr string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("connect to %s: %v", e.Addr, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Unreachable starts the event a sender prints (and, after ForwardFailed,
// a hop of a chain) when it could not connect to its receiver at all
// (UnreachableError).
const Unreachable = "unreachable: "

// NewToken returns a fresh one-time token, hex encoded as it travels on
// the agents' stdin.
func NewToken() (string, error) { return peerauth.NewToken() }

// ParseToken reads a token line as NewToken writes it.
func ParseToken(line string) ([]byte, error) { return peerauth.ParseToken(line) }

func writeFrame(w io.Writer, t byte, p []byte) error {
	var h [5]byte
	h[0] = t
	binary.BigEndian.PutUint32(h[1:], uint32(len(p)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// readFrame reads one frame into buf (at least maxFrame long).
func readFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if int64(n) > int64(len(buf)) {
		return 0, nil, fmt.Errorf("direct copy: a frame of %d bytes (at most %d)", n, len(buf))
	}
	p := buf[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, fmt.Errorf("direct copy: stream cut short: %w", err)
	}
	return h[0], p, nil
}

// ErrAuth says the other end of a direct copy does not know its token.
var ErrAuth = peerauth.ErrAuth

// copyAuth is the handshake of direct copies (package peerauth).
var copyAuth = peerauth.Scheme{Label: "drover-direct-copy-1", Timeout: handshakeTimeout}

// proveSender is the sender's half of the handshake.
func proveSender(conn net.Conn, token []byte) error {
	if err := copyAuth.ProveDialer(conn, token); err != nil {
		return fmt.Errorf("direct copy: %w", err)
	}
	return nil
}

// proveReceiver is the receiver's half of the handshake.
func proveReceiver(conn net.Conn, token []byte) error {
	return proveReceiverWithin(conn, token, handshakeTimeout)
}

// proveReceiverWithin is proveReceiver with the whole exchange bounded by
// within.
func proveReceiverWithin(conn net.Conn, token []byte, within time.Duration) error {
	auth := copyAuth
	auth.Timeout = within
	if err := auth.ProveListener(conn, token); err != nil {
		return fmt.Errorf("direct copy: %w", err)
	}
	return nil
}

// dialPeer connects to a receiver and proves the token.
func dialPeer(ctx context.Context, addr string, token []byte) (net.Conn, error) {
	d := net.Dialer{Timeout: directDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to %s: %w", addr, err)
		}
		return nil, &UnreachableError{Addr: addr, Err: err}
	}
	if err := proveSender(conn, token); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return conn, nil
}

// manifestLine writes one file's MANIFEST line: the relay (copier.file)
// and direct copies write the same bytes, so a checkpoint has one digest
// however it travelled.
func writeManifestLine(b *bytes.Buffer, rel string, size int64, sum []byte) {
	fmt.Fprintf(b, "%s %d %x\n", strconv.Quote(rel), size, sum)
}

// SendDirect streams the file or directory srcPath on this host, as the
// checkpoint named name, to the receiver at addr, holding reads to rate
// bytes per second when positive. It returns the digest (sha256 of the
// MANIFEST) and size once the receiver said it renamed its copy into
// place. A receiver that takes nothing, or says nothing, for idle
// (CopyIdle when 0) ends the copy with an *IdleError.
func SendDirect(ctx context.Context, addr string, token []byte, srcPath, name string, rate int64, idle time.Duration) (string, int64, error) {
	raw, err := dialPeer(ctx, addr, token)
	if err != nil {
		return "", 0, err
	}
	defer raw.Close()
	conn := newIdleConn(raw, idle)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fi, err := os.Stat(srcPath)
	if err != nil {
		return "", 0, fmt.Errorf("read checkpoint %s: %w", srcPath, err)
	}
	s := &sender{ctx: ctx, w: bufio.NewWriterSize(conn, 256<<10), buf: make([]byte, copyBuffer), lim: newLimiter(rate, realClock{})}
	if err := s.entry(srcPath, name, fi); err != nil {
		return "", 0, s.ctxErr(err)
	}
	if err := writeFrame(s.w, frameManifest, s.manifest.Bytes()); err != nil {
		return "", 0, s.ctxErr(err)
	}
	if err := s.w.Flush(); err != nil {
		return "", 0, s.ctxErr(err)
	}
	sum := sha256.Sum256(s.manifest.Bytes())
	digest := hex.EncodeToString(sum[:])
	if err := readAnswer(conn, digest); err != nil {
		return "", 0, s.ctxErr(err)
	}
	return digest, s.size, nil
}

// readAnswer waits for the receiver's verdict on the copy of digest,
// through its frameWait while it finishes.
func readAnswer(conn net.Conn, digest string) error {
	buf := make([]byte, 4<<10)
	t, p, err := readFrame(conn, buf)
	for err == nil && t == frameWait {
		t, p, err = readFrame(conn, buf)
	}
	switch {
	case err != nil:
		return fmt.Errorf("direct copy: no answer from the receiver: %w", err)
	case t == frameFail:
		return fmt.Errorf("direct copy: the receiver refused it: %s", p)
	case t != frameOK || string(p) != digest:
		return fmt.Errorf("direct copy: the receiver's copy has MANIFEST sha256 %q, sent %s", p, digest)
	}
	return nil
}

type sender struct {
	ctx      context.Context
	w        *bufio.Writer
	buf      []byte
	lim      *limiter
	manifest bytes.Buffer
	size     int64
}

func (s *sender) ctxErr(err error) error {
	if e := s.ctx.Err(); e != nil {
		return e
	}
	return err
}

// entry sends one file or directory tree, in name order as the relay
// reads it; rel is its path under <seq>/.
func (s *sender) entry(p, rel string, fi os.FileInfo) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := writeFrame(s.w, frameDir, []byte(rel)); err != nil {
			return err
		}
		kids, err := os.ReadDir(p)
		if err != nil {
			return fmt.Errorf("read checkpoint %s: %w", p, err)
		}
		for _, k := range kids {
			ki, err := k.Info()
			if err != nil {
				return fmt.Errorf("read checkpoint %s: %w", p, err)
			}
			if err := s.entry(path.Join(p, k.Name()), path.Join(rel, k.Name()), ki); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		return s.file(p, rel)
	}
	return nil // as the relay: links, fifos, sockets and devices are not copied
}

func (s *sender) file(p, rel string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("read checkpoint %s: %w", p, err)
	}
	defer f.Close()
	if err := writeFrame(s.w, frameFile, []byte(rel)); err != nil {
		return err
	}
	h := sha256.New()
	var in io.Reader = f
	if s.lim != nil {
		in = limitedReader{ctx: s.ctx, r: f, l: s.lim}
	}
	var n int64
	for {
		k, rerr := in.Read(s.buf)
		if k > 0 {
			h.Write(s.buf[:k])
			n += int64(k)
			if err := writeFrame(s.w, frameData, s.buf[:k]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("read checkpoint %s: %w", p, rerr)
		}
	}
	sum := h.Sum(nil)
	if err := writeFrame(s.w, frameEnd, sum); err != nil {
		return err
	}
	s.size += n
	writeManifestLine(&s.manifest, rel, n, sum)
	return nil
}
