package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// maxJumpDepth bounds ProxyJump chains so that a loop in ~/.ssh/config or
// the inventory fails instead of recursing forever.
const maxJumpDepth = 8

// sftpRequestsPerFile is how many SFTP requests one file transfer keeps in
// flight; with 32 KiB packets that is 2 MiB per file, enough to fill a
// datacenter link despite round trips.
const sftpRequestsPerFile = 64

// SFTPClientOptions are the pkg/sftp options of every SFTP client drover
// opens: transfers keep sftpRequestsPerFile requests in flight, for reads
// and for writes from a reader whose size is known. Exported so that tests
// measuring round trips use the client the transport uses.
func SFTPClientOptions() []sftp.ClientOption {
	return []sftp.ClientOption{
		sftp.UseConcurrentWrites(true),
		sftp.UseConcurrentReads(true),
		sftp.MaxConcurrentRequestsPerFile(sftpRequestsPerFile),
	}
}

// sshTransport is one SSH connection to a host, shared by every command
// (one session each) and by one lazily opened SFTP client.
type sshTransport struct {
	host   Endpoint
	addr   string // host:port actually connected to, for errors
	client *ssh.Client
	jumps  func() // gives back the ProxyJump hops, after client closes

	done chan struct{} // closed once the connection is gone
	// answered is when a keepalive was last answered (UnixNano), and
	// fresh how long such an answer vouches for the connection (the
	// keepalive interval): Ping trusts it rather than ask again.
	answered atomic.Int64
	fresh    time.Duration

	mu       sync.Mutex
	lostWhy  error // first reason the connection died
	sftp     *sftpFS
	shutdown bool
}

// dialSSH connects to h (through its ProxyJump hops), verifies the host key
// and authenticates, then starts keepalives.
func dialSSH(ctx context.Context, h Endpoint, opts DialOptions) (Transport, error) {
	cfg, err := loadSSHConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", h.Name, err)
	}
	client, jumps, addr, err := dialClient(ctx, h, opts, cfg, 0)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	t := &sshTransport{host: h, addr: addr, client: client, jumps: func() { once.Do(jumps) }, done: make(chan struct{})}
	go t.watch()
	if opts.KeepAliveInterval > 0 {
		t.fresh = opts.KeepAliveInterval
		go t.keepalive(opts.KeepAliveInterval, opts.KeepAliveCountMax)
	}
	return t, nil
}

// dialClient returns an authenticated client for h, dialling its jump hosts
// first (or sharing a connection to them, opts.Jumps); the returned release
// gives the jump hosts back and must be called after the client is closed.
func dialClient(ctx context.Context, h Endpoint, opts DialOptions, cfg *sshConfig, depth int) (*ssh.Client, func(), string, error) {
	tgt, err := resolveTarget(ctx, h, cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("connect to %s: %w", h.Name, err)
	}
	addr := tgt.addr()
	fail := func(err error) error { return fmt.Errorf("connect to %s (%s): %w", tgt.name, addr, err) }

	release := func() {}
	var conn net.Conn
	switch {
	case tgt.proxyJump != "":
		if depth >= maxJumpDepth {
			return nil, nil, addr, fail(fmt.Errorf("proxy jump chain longer than %d hops (a loop?)", maxJumpDepth))
		}
		jh, err := jumpHost(tgt.proxyJump, h, opts.Inventory)
		if err != nil {
			return nil, nil, addr, fail(err)
		}
		jc, err := acquireJump(ctx, jh, opts, cfg, depth+1)
		if err != nil {
			return nil, nil, addr, fail(fmt.Errorf("via proxy jump %s: %w", tgt.proxyJump, err))
		}
		release = jc.done
		conn, err = jc.openThrough(ctx, addr, opts.ConnectTimeout)
		if err != nil {
			release()
			// The jump host could not reach the target (refused,
			// timed out): the target is unreachable from here.
			return nil, nil, addr, fail(unreachable(fmt.Errorf("via proxy jump %s: %w", tgt.proxyJump, err)))
		}
	case tgt.proxyCommand != "":
		conn, err = startProxyCommand(tgt)
		if err != nil {
			return nil, nil, addr, fail(unreachable(err))
		}
	default:
		d := net.Dialer{Timeout: opts.ConnectTimeout}
		conn, err = d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, nil, addr, fail(describeDialError(err, opts.ConnectTimeout))
		}
		conn = quickAck(conn)
	}
	client, err := handshake(ctx, conn, tgt, opts)
	if err != nil {
		if pc, ok := conn.(*proxyConn); ok {
			err = pc.explain(err) // closed by handshake: the command has ended
		}
		release()
		return nil, nil, addr, fail(err)
	}
	return client, release, addr, nil
}

// acquireJump connects to the jump host jh: through opts.Jumps, shared
// with the other dials through it and retried while it hangs up during the
// handshake; without, a connection of this dial's own.
func acquireJump(ctx context.Context, jh Endpoint, opts DialOptions, cfg *sshConfig, depth int) (*jumpConn, error) {
	dial := func() (*ssh.Client, func(), error) {
		c, hops, _, err := dialClient(ctx, jh, opts, cfg, depth)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close(); hops() }, nil
	}
	if opts.Jumps == nil {
		c, release, err := dial()
		if err != nil {
			return nil, err
		}
		return &jumpConn{client: c, done: release}, nil
	}
	return opts.Jumps.acquire(ctx, jh, func() (*ssh.Client, func(), error) {
		return retryJumpDial(ctx, opts.ConnectTimeout, dial)
	})
}

// handshake runs the SSH handshake and authentication on conn within the
// connect timeout; conn is closed on failure.
func handshake(ctx context.Context, conn net.Conn, tgt sshTarget, opts DialOptions) (*ssh.Client, error) {
	hk, err := newHostKeyChecker(tgt, opts.AcceptNewHosts, opts.KnownHosts, opts.Warn)
	if err != nil {
		conn.Close()
		return nil, NameOpenFiles("read known hosts", err)
	}
	auth := loadAuth(tgt, opts.AgentSocket)
	defer auth.close()
	if auth.err != nil {
		conn.Close()
		return nil, auth.err
	}
	var authStarted atomic.Bool
	config := &ssh.ClientConfig{
		User:              tgt.user,
		Auth:              auth.methods(),
		AuthCallback:      auth.callback(&authStarted),
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.algorithms(tgt.addr()),
		Timeout:           opts.ConnectTimeout,
	}

	// Deadlines are not supported on channels (ProxyJump), so a timer and
	// the context close the connection instead; either unblocks the
	// handshake.
	var timedOut, cancelled atomic.Bool
	timer := time.AfterFunc(opts.ConnectTimeout, func() { timedOut.Store(true); conn.Close() })
	stop := context.AfterFunc(ctx, func() { cancelled.Store(true); conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, tgt.addr(), config)
	timer.Stop()
	stop()
	if err != nil {
		conn.Close()
		return nil, handshakeError(ctx, err, auth, tgt.user, handshakeState{authStarted.Load(), timedOut.Load(), cancelled.Load(), opts.ConnectTimeout})
	}
	if timedOut.Load() || cancelled.Load() {
		// The timer fired just as the handshake finished: the conn is
		// closed under the client.
		c.Close()
		if cancelled.Load() {
			return nil, fmt.Errorf("ssh handshake: %w", ctx.Err())
		}
		return nil, unreachable(fmt.Errorf("ssh handshake timed out after %v", opts.ConnectTimeout))
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// handshakeError classifies a failed handshake by what happened, not by
// the library's message: a refused host key (*HostKeyError), a cancelled
// context, a refusal during authentication (*AuthError: every method was
// refused, or the host hung up once authentication had begun, as sshd does
// after MaxAuthTries), and otherwise a connection that broke or stalled
// before authentication (*UnreachableError).
func handshakeError(ctx context.Context, err error, auth *authSet, user string, st handshakeState) error {
	var hke *HostKeyError
	switch {
	case errors.As(err, &hke):
		return hke
	case st.cancelled:
		return fmt.Errorf("ssh handshake: %w", ctx.Err())
	case st.timedOut:
		return unreachable(fmt.Errorf("ssh handshake timed out after %v", st.timeout))
	case errors.Is(err, errAuthExhausted), st.authStarted:
		return auth.authError(user, err)
	}
	return unreachable(err)
}

// handshakeState is what happened to a handshake besides its error.
type handshakeState struct {
	authStarted, timedOut, cancelled bool
	timeout                          time.Duration
}

// describeDialError turns a TCP dial error into the reason a user can act
// on, keeping the original wrapped.
func describeDialError(err error, timeout time.Duration) error {
	var ne net.Error
	switch {
	case IsTooManyOpenFiles(err):
		// This machine's limit, not the host's state: not unreachable.
		return NameOpenFiles("open a connection", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return unreachable(fmt.Errorf("connection refused (is sshd listening on that port?): %w", err))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return unreachable(fmt.Errorf("timed out after %v (host down or unreachable?): %w", timeout, err))
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return unreachable(fmt.Errorf("no route to host: %w", err))
	case errors.Is(err, context.Canceled):
		return err
	}
	// Other network errors (reset, DNS failure): the host may come back.
	return unreachable(err)
}

// watch records that the connection is gone as soon as the SSH mux stops
// (TCP reset, EOF, or our own Close).
func (t *sshTransport) watch() {
	err := t.client.Wait()
	if err == nil {
		err = errors.New("connection closed by the host")
	}
	t.markLost(err)
	t.jumps()
	close(t.done)
}

// markLost records the first reason the connection died.
func (t *sshTransport) markLost(why error) {
	t.mu.Lock()
	if t.lostWhy == nil {
		t.lostWhy = why
	}
	t.mu.Unlock()
}

// keepalive sends keepalive@openssh.com requests every interval (like
// ServerAliveInterval) and closes the connection after max consecutive ones
// go unanswered, so that every Process.Wait on it returns promptly instead
// of hanging until TCP gives up (minutes to hours).
func (t *sshTransport) keepalive(interval time.Duration, max int) {
	replies := make(chan error, max+1)
	outstanding := 0
	missed := 0
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-t.done:
			return
		case err := <-replies:
			outstanding--
			if err != nil {
				// The mux is going down; watch records why.
				return
			}
			missed = 0
			t.answered.Store(time.Now().UnixNano())
		case <-ticker.C:
			if outstanding > 0 {
				missed++
				if missed >= max {
					t.markLost(fmt.Errorf("no reply to %d keepalives over %v", missed, time.Duration(missed)*interval))
					t.client.Close()
					return
				}
			}
			if outstanding <= max {
				outstanding++
				go func() {
					// OpenSSH answers unknown global requests with
					// a failure, which is a reply all the same.
					_, _, err := t.client.SendRequest("keepalive@openssh.com", true, nil)
					replies <- err
				}()
			}
		}
	}
}

// lostError builds the ErrConnectionLost error for a command whose channel
// closed without an exit status.
func (t *sshTransport) lostError(cause error) error {
	// The mux may notice a dead connection a moment after the channel
	// does; give watch a short while to record why.
	select {
	case <-t.done:
	case <-time.After(2 * time.Second):
	}
	t.mu.Lock()
	why := t.lostWhy
	t.mu.Unlock()
	if why == nil {
		why = fmt.Errorf("channel closed without exit status (%v)", cause)
	}
	return fmt.Errorf("%s (%s): %w: %v", t.host.Name, t.addr, ErrConnectionLost, why)
}

func (t *sshTransport) Host() Endpoint { return t.host }

// Start opens a session on the shared connection and runs cmd through the
// login shell with every word quoted (ShellCommand).
func (t *sshTransport) Start(ctx context.Context, cmd Cmd) (Process, error) {
	if err := checkCmd(cmd); err != nil {
		return nil, fmt.Errorf("start on %s: %w", t.host.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, err)
	}
	s, err := t.newSession(ctx)
	if err != nil {
		select {
		case <-t.done:
			return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, t.lostError(err))
		default:
		}
		return nil, fmt.Errorf("start %s on %s: open session: %w", cmd.name(), t.host.Name, err)
	}
	p := &sshProcess{t: t, s: s, ctx: ctx, waited: make(chan error, 1)}
	s.Stdin = cmd.Stdin
	if cmd.Stdout != nil {
		p.stdout = &gatedWriter{w: cmd.Stdout}
		s.Stdout = p.stdout
	}
	if cmd.Stderr != nil {
		p.stderr = &gatedWriter{w: cmd.Stderr}
		s.Stderr = p.stderr
	}
	if err := s.Start(ShellCommand(cmd)); err != nil {
		s.Close()
		return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, err)
	}
	go func() { p.waited <- s.Wait() }()
	p.stop = context.AfterFunc(ctx, func() { s.Close() })
	return p, nil
}

// sessionRetryLimit bounds how long Start waits for a free session slot.
const sessionRetryLimit = time.Minute

// newSession opens a session channel. sshd refuses sessions beyond
// MaxSessions (10 by default) per connection ("open failed"; other servers
// say "administratively prohibited"). Since drover multiplexes everything
// over one connection, Start then waits for a running command to finish
// and free a slot rather than failing.
func (t *sshTransport) newSession(ctx context.Context) (*ssh.Session, error) {
	deadline := time.Now().Add(sessionRetryLimit)
	delay := 20 * time.Millisecond
	for {
		s, err := t.client.NewSession()
		var oce *ssh.OpenChannelError
		if err == nil || !errors.As(err, &oce) || (oce.Reason != ssh.Prohibited && oce.Reason != ssh.ConnectionFailed) || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.done:
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// checkCmd rejects commands no transport can run faithfully.
func checkCmd(cmd Cmd) error {
	switch {
	case cmd.Shell != "" && len(cmd.Args) > 0:
		return errors.New("command has both Args and a Shell line")
	case cmd.Shell == "" && (len(cmd.Args) == 0 || cmd.Args[0] == ""):
		return errors.New("empty command")
	}
	for k := range cmd.Env {
		if !ValidEnvName(k) {
			return fmt.Errorf("environment variable name %q is not a valid identifier", k)
		}
	}
	return nil
}

type sshProcess struct {
	t              *sshTransport
	s              *ssh.Session
	ctx            context.Context
	stop           func() bool
	waited         chan error
	stdout, stderr *gatedWriter
}

// Signal sends an RFC 4254 signal request on the command's channel; sshd
// signals the session's process group with it. A channel already closed
// (the command exited, or Wait returned) makes it do nothing.
func (p *sshProcess) Signal(sig syscall.Signal) error {
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if name == "" {
		return fmt.Errorf("signal %d on %s: no name for it in the SSH protocol", int(sig), p.t.host.Name)
	}
	if err := p.s.Signal(ssh.Signal(name)); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("signal SIG%s on %s: %w", name, p.t.host.Name, p.t.lostError(err))
	}
	return nil
}

// Wait returns when the command's exit status arrives, the connection is
// lost, or ctx is cancelled. On cancel it does not wait for the host: sshd
// holds a session channel open until its process exits, and the point of
// cancelling is not to wait for that. Output arriving after Wait returned
// is dropped, never written to the caller's writers.
func (p *sshProcess) Wait() error {
	var err error
	select {
	case err = <-p.waited:
	case <-p.ctx.Done():
		select {
		case err = <-p.waited:
		default:
			p.stdout.shut()
			p.stderr.shut()
			return fmt.Errorf("%s: command cancelled: %w", p.t.host.Name, p.ctx.Err())
		}
	}
	p.stop()
	p.s.Close()
	if err == nil {
		return nil
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		if sig := ee.Signal(); sig != "" {
			return &ExitError{Host: p.t.host.Name, Code: 128 + signalNumber(sig), Signal: sig}
		}
		return &ExitError{Host: p.t.host.Name, Code: ee.ExitStatus()}
	}
	var missing *ssh.ExitMissingError
	if errors.Is(err, io.EOF) && !errors.As(err, &missing) {
		// Session.Wait returns a missing or non-zero exit status before
		// any stream's error: the command exited 0, and only the copy of
		// its stdin failed, on the channel its exit closed (a line
		// written between the channel's close and Wait's end). A command
		// need not read its stdin to its end, as os/exec ignores EPIPE
		// there; taken for a lost connection, a clean finish was once
		// restarted (issue 37).
		return nil
	}
	if p.ctx.Err() != nil {
		return fmt.Errorf("%s: command cancelled: %w", p.t.host.Name, p.ctx.Err())
	}
	return p.t.lostError(err)
}

// gatedWriter forwards to w until shut; shut waits for a Write in progress,
// so nothing reaches w once it returns.
type gatedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gatedWriter) Write(b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(b), nil
	}
	return g.w.Write(b)
}

func (g *gatedWriter) shut() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// signalNumber maps a signal name without "SIG" to its Linux number, 0 when
// unknown.
func signalNumber(name string) int {
	return int(unix.SignalNum("SIG" + name))
}

// FS returns the transport's SFTP file system, opening the SFTP session on
// first use and reusing it afterwards. When the SFTP handshake fails, it
// asks the login shell why (CheckLogin): a shell that prints or exits for
// a non-interactive session is what "packet too long" and "unexpected
// EOF" from SFTP usually mean, and the error then says so.
func (t *sshTransport) FS(ctx context.Context) (FS, error) {
	fsys, handshake, err := t.openFS(ctx)
	if handshake != nil {
		if le := CheckLogin(ctx, t); le != nil {
			return nil, fmt.Errorf("open sftp on %s: %w (sftp: %v)", t.host.Name, le, handshake)
		}
	}
	return fsys, err
}

// openFS is FS without the diagnosis; handshake is the SFTP client's own
// error, when it was the handshake that failed.
func (t *sshTransport) openFS(ctx context.Context) (fsys FS, handshake, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sftp != nil {
		return t.sftp, nil, nil
	}
	if t.shutdown {
		return nil, nil, fmt.Errorf("open sftp on %s: transport closed", t.host.Name)
	}
	type result struct {
		c   *sftp.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := sftp.NewClient(t.client, SFTPClientOptions()...)
		ch <- result{c, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, nil, fmt.Errorf("open sftp on %s: %w", t.host.Name, ctx.Err())
	}
	if r.err != nil {
		return nil, r.err, fmt.Errorf("open sftp on %s: %w", t.host.Name, r.err)
	}
	t.sftp = &sftpFS{c: r.c, t: t}
	return t.sftp, nil, nil
}

// Close closes the SFTP client, the connection and its jump hosts; running
// commands' Wait return ErrConnectionLost.
func (t *sshTransport) Close() error {
	t.mu.Lock()
	t.shutdown = true
	fsys := t.sftp
	t.mu.Unlock()
	t.markLost(errors.New("transport closed"))
	if fsys != nil {
		fsys.c.Close()
	}
	err := t.client.Close()
	t.jumps()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Ping sends one keepalive@openssh.com request and waits for its reply
// (OpenSSH answers unknown global requests with a failure, which is a
// reply all the same). No reply before ctx ends closes the connection: a
// link that does not answer a keepalive is taken for dead, as keepalive
// does after KeepAliveCountMax of them. A keepalive of the connection's
// own answered within the last keepalive interval is answer enough.
func (t *sshTransport) Ping(ctx context.Context) error {
	select {
	case <-t.done:
		return t.lostError(errors.New("connection closed"))
	default:
	}
	if last := t.answered.Load(); last > 0 && time.Since(time.Unix(0, last)) < t.fresh {
		return nil
	}
	replied := make(chan error, 1)
	go func() {
		_, _, err := t.client.SendRequest("keepalive@openssh.com", true, nil)
		replied <- err
	}()
	select {
	case err := <-replied:
		if err != nil {
			return t.lostError(err)
		}
		return nil
	case <-ctx.Done():
		t.markLost(fmt.Errorf("no reply to a keepalive: %w", context.Cause(ctx)))
		t.client.Close()
		return t.lostError(ctx.Err())
	}
}
