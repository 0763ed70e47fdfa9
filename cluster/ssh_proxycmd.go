package cluster

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyConn is a connection to a host through an ssh_config ProxyCommand:
// the command's stdin and stdout carry the SSH stream, as with ssh(1).
// Closing it ends the command (its whole process group), so that nothing
// is left running after drover.
type proxyConn struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	line   string

	once   sync.Once
	waited chan struct{}
	stderr *TailBuffer
}

// startProxyCommand runs t's ProxyCommand, its tokens expanded (%h host,
// %p port, %r remote user, %n the name as given, %%), through /bin/sh like
// ssh does.
func startProxyCommand(t sshTarget) (*proxyConn, error) {
	line := expandProxyCommand(t.proxyCommand, t)
	cmd := exec.Command("/bin/sh", "-c", "exec "+line)
	// Its own process group: Close ends the command and what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &proxyConn{cmd: cmd, line: line, waited: make(chan struct{}), stderr: NewTailBuffer(2048)}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("proxy command %q: %w", line, err)
	}
	if c.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("proxy command %q: %w", line, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proxy command %q: %w", line, err)
	}
	go func() { _ = cmd.Wait(); close(c.waited) }()
	return c, nil
}

// expandProxyCommand expands ssh_config's tokens in a ProxyCommand.
func expandProxyCommand(s string, t sshTarget) string {
	return expandPercent(s, map[byte]string{
		'h': t.hostname, 'p': strconv.Itoa(t.port), 'r': t.user, 'n': t.alias,
	})
}

func (c *proxyConn) Read(p []byte) (int, error) { return c.stdout.Read(p) }

// explain adds what the command said on stderr to err, a failure of the
// SSH handshake over it; call it after Close, when the command has ended.
func (c *proxyConn) explain(err error) error {
	if msg := strings.TrimSpace(c.stderr.String()); msg != "" {
		return fmt.Errorf("%w (proxy command %q said: %s)", err, c.line, msg)
	}
	return fmt.Errorf("%w (through proxy command %q)", err, c.line)
}

func (c *proxyConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

// Close ends the command: its stdin closes (most proxies exit then), and
// its process group is killed if it is still there a moment later.
func (c *proxyConn) Close() error {
	c.once.Do(func() {
		c.stdin.Close()
		select {
		case <-c.waited:
		case <-time.After(time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.waited
		}
	})
	return nil
}

func (c *proxyConn) LocalAddr() net.Addr                { return proxyAddr(c.line) }
func (c *proxyConn) RemoteAddr() net.Addr               { return proxyAddr(c.line) }
func (c *proxyConn) SetDeadline(t time.Time) error      { return nil }
func (c *proxyConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *proxyConn) SetWriteDeadline(t time.Time) error { return nil }

// proxyAddr names a proxy command where a net.Addr is wanted.
type proxyAddr string

func (a proxyAddr) Network() string { return "proxycommand" }
func (a proxyAddr) String() string  { return string(a) }
