// Package lighthost serves many light SSH hosts from one process, for
// benchmarks at a scale (hundreds of hosts) where one OpenSSH sshd per
// network namespace would cost the machine more than drover does. Each host
// has its own listening address, host key and home directory; they share
// the process, this machine's user and its file system otherwise.
//
// It is written with golang.org/x/crypto/ssh's server side and behaves as
// OpenSSH's sshd does where drover can tell: a command line runs under the
// login shell (`$SHELL -c LINE`) in its own session and process group,
// starting in the home directory; "env" requests add to its environment;
// the exit status or the killing signal ("exit-status", "exit-signal") is
// sent when it exits, the channel closes once its output is drained (a
// background child that holds stdout keeps it open, as with sshd); a
// "signal" request is delivered to the command's process group (killpg);
// the sftp subsystem is github.com/pkg/sftp's server rooted at the home,
// with posix-rename, and symlink targets stored as given (symlinkFix). Keepalives and other global requests are answered
// with a failure, as sshd does. It passes the transport conformance suite
// (cluster/transporttest), which is what "behaves as OpenSSH does" means here.
package lighthost

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster/sigclean"
)

// Options shape a Server.
type Options struct {
	// Shell runs every command line ("-c LINE"); default /bin/sh.
	Shell string
	// AuthorizedKey is the one public key that may log in, as any user.
	AuthorizedKey ssh.PublicKey
}

// Server is a set of light hosts in this process.
type Server struct {
	opts  Options
	hosts []*Host
	mu    sync.Mutex
	wg    sync.WaitGroup
	// Counts, for benchmarks that want to know what a client asked for.
	conns, channels, execs, sftps atomic.Int64
	// sessions are the session ids (the shells' pids) of commands
	// started and not yet exited, for Close.
	sessions map[int]bool
}

// Host is one light host: an address, a host key and a home.
type Host struct {
	Name string
	// Addr is where it listens ("127.0.0.1:PORT").
	Addr *net.TCPAddr
	// Home is its home directory on this machine.
	Home string
	// HostKey is its public host key, for known_hosts.
	HostKey ssh.PublicKey

	s      *Server
	ln     net.Listener
	config *ssh.ServerConfig
	mu     sync.Mutex
	open   map[*ssh.ServerConn]bool
}

// Counts is what clients asked of a Server since it started.
type Counts struct {
	Conns, Channels, Execs, SFTPs int64
}

// New makes a server with no hosts yet.
func New(opts Options) (*Server, error) {
	if opts.Shell == "" {
		opts.Shell = "/bin/sh"
	}
	if opts.AuthorizedKey == nil {
		return nil, errors.New("lighthost: no authorized key")
	}
	return &Server{opts: opts, sessions: map[int]bool{}}, nil
}

// Counts returns what clients asked for so far.
func (s *Server) Counts() Counts {
	return Counts{Conns: s.conns.Load(), Channels: s.channels.Load(), Execs: s.execs.Load(), SFTPs: s.sftps.Load()}
}

// AddHost starts a host named name listening on listen ("127.0.0.1:0")
// with home as its home directory (created if missing) and a new host key.
func (s *Server) AddHost(name, listen, home string) (*Host, error) {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("lighthost %s: %w", name, err)
	}
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("lighthost %s: %w", name, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("lighthost %s: host key: %w", name, err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("lighthost %s: host key: %w", name, err)
	}
	want := s.opts.AuthorizedKey.Marshal()
	config := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(want) {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	config.AddHostKey(signer)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("lighthost %s: listen on %s: %w", name, listen, err)
	}
	h := &Host{Name: name, Addr: ln.Addr().(*net.TCPAddr), Home: abs, HostKey: signer.PublicKey(),
		s: s, ln: ln, config: config, open: map[*ssh.ServerConn]bool{}}
	s.mu.Lock()
	s.hosts = append(s.hosts, h)
	s.mu.Unlock()
	s.wg.Add(1)
	go h.accept()
	return h, nil
}

// Hosts returns the hosts in the order they were added.
func (s *Server) Hosts() []*Host {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Host(nil), s.hosts...)
}

// Close stops listening, drops every connection and kills the commands
// still running, with every process in their sessions, as powering the
// hosts off would: the light hosts live in the caller's process, which
// must not leave their processes behind. (A command that already exited
// is not tracked: its session id may be another process's by now.) A
// client that merely goes away leaves its commands running, as with sshd.
func (s *Server) Close() error {
	for _, h := range s.Hosts() {
		h.ln.Close()
		h.mu.Lock()
		for c := range h.open {
			c.Close()
		}
		h.mu.Unlock()
	}
	s.mu.Lock()
	sids := make(map[int]bool, len(s.sessions))
	for sid := range s.sessions {
		sids[sid] = true
	}
	s.mu.Unlock()
	killSessions(sids)
	s.wg.Wait()
	return nil
}

// killSessions SIGKILLs every process whose session id is in sids: a
// command's process group, and the groups it made of its own (drover's
// agent puts the workload in one), are all in its session.
func killSessions(sids map[int]bool) {
	if len(sids) == 0 {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if sid, err := unix.Getsid(pid); err == nil && sids[sid] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// KnownHostsLine is h's line for a known_hosts file.
func (h *Host) KnownHostsLine() string {
	return fmt.Sprintf("[%s]:%d %s", h.Addr.IP, h.Addr.Port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey))))
}

func (h *Host) accept() {
	defer h.s.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.s.wg.Add(1)
		go func() {
			defer h.s.wg.Done()
			h.serve(c)
		}()
	}
}

func (h *Host) serve(c net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(c, h.config)
	if err != nil {
		c.Close()
		return
	}
	h.s.conns.Add(1)
	h.mu.Lock()
	h.open[sc] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.open, sc)
		h.mu.Unlock()
	}()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		h.s.channels.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.session(ch, creqs, sc.User())
		}()
	}
	sc.Close()
	wg.Wait()
}

// session serves one session channel: env requests, then an exec or the
// sftp subsystem; signal requests while a command runs.
func (h *Host) session(ch ssh.Channel, reqs <-chan *ssh.Request, user string) {
	env := []string{"HOME=" + h.Home, "USER=" + user, "LOGNAME=" + user, "SHELL=" + h.s.opts.Shell,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"}
	var started *command
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if err := ssh.Unmarshal(req.Payload, &kv); err != nil || started != nil {
				_ = req.Reply(false, nil)
				continue
			}
			env = append(env, kv.Name+"="+kv.Value)
			_ = req.Reply(true, nil)
		case "exec":
			var line struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &line); err != nil || started != nil {
				_ = req.Reply(false, nil)
				continue
			}
			c, err := h.start(ch, line.Command, env)
			if err != nil {
				_ = req.Reply(false, nil)
				ch.Close()
				continue
			}
			h.s.execs.Add(1)
			started = c
			_ = req.Reply(true, nil)
			go c.finish()
		case "subsystem":
			var name struct{ Name string }
			if err := ssh.Unmarshal(req.Payload, &name); err != nil || name.Name != "sftp" || started != nil {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			h.s.sftps.Add(1)
			started = &command{}
			go h.sftp(ch)
		case "signal":
			var sig struct{ Name string }
			if err := ssh.Unmarshal(req.Payload, &sig); err == nil && started != nil && started.cmd != nil && !started.reaped.Load() {
				if n := unix.SignalNum("SIG" + sig.Name); n != 0 {
					// As sshd: to the session's process group, while
					// its leader lives (after that the id may be
					// another process's).
					_ = syscall.Kill(-started.cmd.Process.Pid, n)
				}
			}
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		default:
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
	// The client closed the channel. A running command keeps running
	// (no terminal, so no SIGHUP), as with sshd.
	if started != nil && started.stdin != nil {
		started.stdin.Close()
	}
}

func (h *Host) sftp(ch ssh.Channel) {
	defer ch.Close()
	rw := struct {
		io.Reader
		io.WriteCloser
	}{&symlinkFix{r: ch, home: h.Home}, ch}
	srv, err := sftp.NewServer(rw, sftp.WithServerWorkingDirectory(h.Home))
	if err != nil {
		return
	}
	_ = srv.Serve()
	srv.Close()
}

// command is a started exec: the process and its pipes.
type command struct {
	reaped atomic.Bool // the leader was waited for: its pid is free
	s      *Server
	ch     ssh.Channel
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	copied sync.WaitGroup
}

// start runs line under the shell in a session of its own, with its
// stdout and stderr copied to the channel and the channel's data to its
// stdin.
func (h *Host) start(ch ssh.Channel, line string, env []string) (*command, error) {
	cmd := exec.Command(h.s.opts.Shell, "-c", line)
	cmd.Dir = h.Home
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	sigclean.Command(cmd) // as sshd: default signal state, whatever the test inherited
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	c := &command{ch: ch, cmd: cmd, stdin: inW, s: h.s}
	h.s.mu.Lock()
	h.s.sessions[cmd.Process.Pid] = true
	h.s.mu.Unlock()
	c.copied.Add(2)
	go func() { defer c.copied.Done(); _, _ = io.Copy(ch, outR); outR.Close() }()
	go func() { defer c.copied.Done(); _, _ = io.Copy(ch.Stderr(), errR); errR.Close() }()
	go func() {
		_, _ = io.Copy(inW, ch)
		inW.Close()
	}()
	return c, nil
}

// finish waits for the command, sends its exit status or signal, and
// closes the channel once its output is drained.
func (c *command) finish() {
	err := c.cmd.Wait()
	c.reaped.Store(true)
	// The session outlives its leader when it started something in the
	// background; Close still finds those by the id, so it stays listed
	// only while the leader runs (a dead leader's id can be reused).
	c.s.mu.Lock()
	delete(c.s.sessions, c.cmd.Process.Pid)
	c.s.mu.Unlock()
	ws, _ := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err != nil && c.cmd.ProcessState == nil {
		ws = syscall.WaitStatus(255 << 8)
	}
	if ws.Signaled() {
		name := strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
		_, _ = c.ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Message    string
			Lang       string
		}{name, ws.CoreDump(), "", ""}))
	} else {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(ws.ExitStatus()))
		_, _ = c.ch.SendRequest("exit-status", false, b[:])
	}
	// As sshd: the status goes when the command exits, the channel
	// closes when its output ends (a background child holding stdout
	// keeps it open).
	c.copied.Wait()
	_ = c.ch.CloseWrite()
	c.ch.Close()
	c.stdin.Close()
}
