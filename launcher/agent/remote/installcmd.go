package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/droverhq/drover/cluster"
)

// installCmd is installScript running on a host: its state as the script
// printed it, and the stdin drover answers on.
type installCmd struct {
	ctx    context.Context
	cancel context.CancelFunc
	t      cluster.Transport
	stdin  *io.PipeWriter
	ready  chan struct{}       // closed at "ready" or when stdout ends
	lines  []string            // stdout up to "ready"
	head   *cluster.HeadBuffer // stdout up to "ready" as it came, to quote
	over   bool                // stdout before "ready" went past its bound
	rest   *cluster.HeadBuffer // stdout after it (the new agent's answer), once read
	read   chan struct{}       // closed when stdout has been read to its end
	stderr *cluster.TailBuffer
	waited chan error
	once   sync.Once
	err    error // the command's end, once waited
}

// installOutput bounds what is kept of the command's stderr, and what is
// read of its stdout before "ready" (a few short lines; a login shell
// printing endlessly stops there) and after it.
const installOutput = 16 << 10

// installLine bounds one line of the script's stdout before "ready".
const installLine = 4 << 10

// startInstall starts installScript with the candidates agents offers.
func startInstall(ctx context.Context, t cluster.Transport, agents Agents, dirs []string) (*installCmd, error) {
	args := []string{"sh", "-c", installScript, "sh", agentDir, strconv.Itoa(len(dirs))}
	args = append(args, dirs...)
	// The largest candidate bounds the whole command: an upload's time
	// depends on the link.
	var size int64
	for _, b := range agents.candidates() {
		args = append(args, "drover-"+b.Sum[:12], strconv.FormatInt(b.Size, 10))
		size = max(size, b.Size)
	}
	c := &installCmd{t: t, ready: make(chan struct{}), read: make(chan struct{}), stderr: cluster.NewTailBuffer(installOutput), waited: make(chan error, 1),
		head: cluster.NewHeadBuffer(installOutput, nil)}
	c.ctx, c.cancel = context.WithTimeout(ctx, uploadTimeout(size))
	c.rest = cluster.NewHeadBuffer(installOutput, c.cancel)
	r, w := io.Pipe()
	c.stdin = w
	out, outW := io.Pipe()
	go c.readOut(out)
	p, err := t.Start(c.ctx, cluster.Cmd{Args: args, Stdin: r, Stdout: outW, Stderr: c.stderr})
	if err != nil {
		outW.Close()
		c.cancel()
		return nil, fmt.Errorf("start sh: %w", err)
	}
	go func() {
		err := p.Wait()
		outW.Close()
		r.Close()
		c.waited <- err
	}()
	return c, nil
}

// readOut splits stdout: lines up to "ready", the rest after. What comes
// before "ready" is bounded (installOutput, installLine): past that the
// command is stopped and the rest of its output thrown away unread, so a
// login shell that prints gigabytes costs a few KiB.
func (c *installCmd) readOut(out io.Reader) {
	defer close(c.read)
	br := bufio.NewReaderSize(out, installLine)
	for {
		line, err := br.ReadSlice('\n')
		c.head.Write(line)
		if errors.Is(err, bufio.ErrBufferFull) || c.head.More() > 0 {
			c.over = true
			close(c.ready) // before the cancel: state sees why it ended
			c.cancel()
			_, _ = io.Copy(io.Discard, br) // until the channel closes
			return
		}
		if err != nil {
			break
		}
		l := strings.TrimSuffix(string(line), "\n")
		if l == "ready" {
			close(c.ready)
			_, _ = io.Copy(c.rest, br)
			return
		}
		c.lines = append(c.lines, l)
	}
	close(c.ready)
}

// state waits for the script's state (or its end) and parses it.
func (c *installCmd) state() (hostState, error) {
	select {
	case <-c.ready:
	case <-c.ctx.Done():
		select {
		case <-c.ready:
		default:
			return hostState{}, c.ctx.Err()
		}
	}
	if err := c.login(); err != nil {
		return hostState{}, err
	}
	if len(c.lines) == 0 || c.lines[0] != cluster.LoginMarker {
		return hostState{}, c.failed("the install command printed nothing")
	}
	lines := c.lines[1:]
	if len(lines) == 0 {
		return hostState{}, c.failed("uname -sm printed nothing")
	}
	if k, v, _ := strings.Cut(lines[0], " "); k == "missing" {
		return hostState{}, &MissingCommandsError{Host: c.t.Host().Name, Commands: strings.Fields(v), Path: strings.TrimPrefix(c.lineAfter("path "), "path ")}
	}
	p, ok := unamePlatform(strings.TrimSpace(lines[0]))
	if !ok {
		return hostState{}, fmt.Errorf("uname -sm printed \"%s\", want an OS and a machine", cluster.Escape(strings.TrimSpace(lines[0])))
	}
	st := hostState{platform: p, versions: map[string]string{}}
	for _, l := range lines[1:] {
		switch k, v, _ := strings.Cut(l, " "); k {
		case "home":
			st.home = v
		case "made":
			st.made = append(st.made, v)
		case "have":
			name, version, _ := strings.Cut(v, " ")
			st.versions[name] = version
		}
	}
	return st, nil
}

// login checks that the script's first line is its marker: what came
// before is the login shell's (*cluster.LoginShellError), as is no line at
// all from a shell that exited; more than installOutput is a
// *cluster.TooMuchOutputError.
func (c *installCmd) login() error {
	var werr error
	if !c.over && !slices.Contains(c.lines, cluster.LoginMarker) {
		werr = c.wait() // stdout ended without it: so did the command
	}
	if err := cluster.LoginOutput(c.t.Host().Name, c.head.Bytes(), c.head.More(), werr); err != nil {
		return err
	}
	if c.over {
		return c.head.Overflow(c.t.Host().Name, "the install command")
	}
	return nil
}

// lineAfter is the first line of the state starting with prefix, "" when
// none does.
func (c *installCmd) lineAfter(prefix string) string {
	for _, l := range c.lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// MissingCommandsError is a host whose login PATH lacks a command the
// install needs (uname, coreutils): named as such rather than as the
// garbled state the script would print without it.
type MissingCommandsError struct {
	Host     string
	Commands []string
	Path     string // the login shell's PATH
}

func (e *MissingCommandsError) Error() string {
	return fmt.Sprintf("%s: %s not found in the login shell's PATH (%s); drover's install needs uname and coreutils (mkdir, wc, cat, chmod, mv, rm) there",
		e.Host, strings.Join(e.Commands, ", "), cluster.Escape(e.Path))
}

// failed is the error for a script that ended before it was ready.
func (c *installCmd) failed(what string) error {
	err := c.wait()
	if msg := firstLine([]byte(c.stderr.String())); msg != "" {
		what += ": " + msg
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return errors.New(what)
}

// skip tells the script no upload follows (name, the agent there, is the
// one in use) and waits for its end.
func (c *installCmd) skip(name string) error {
	_, _ = io.WriteString(c.stdin, "skip "+name+"\n")
	c.stdin.Close()
	if err := c.wait(); err != nil {
		return fmt.Errorf("read the host's state: %w", err)
	}
	return nil
}

// wait waits for the command's end (once).
func (c *installCmd) wait() error {
	c.once.Do(func() {
		select {
		case c.err = <-c.waited:
		case <-c.ctx.Done():
			c.err = c.ctx.Err()
		}
	})
	return c.err
}

// stop ends the command if it is still running (an error on the way).
func (c *installCmd) stop() {
	c.stdin.CloseWithError(errors.New("install stopped"))
	c.cancel()
}

// upload sends b as name through tmp (remote, on the host, whose
// platform is plat): a header line, then the file, then EOF; the script
// writes, checks and moves it (see installScript).
func (c *installCmd) upload(b Binary, plat Platform, name, tmp, remote string) error {
	f, err := os.Open(b.Path)
	if err != nil {
		c.stdin.Close()
		return &uploadError{err}
	}
	defer f.Close()
	go func() {
		_, err := fmt.Fprintf(c.stdin, "%s %s %s\n", name, tmp, b.Version)
		if err == nil {
			_, err = io.Copy(c.stdin, &ctxReader{ctx: c.ctx, r: f})
		}
		c.stdin.CloseWithError(err)
	}()
	return c.checked(b, plat, remote)
}

// checked turns the script's end after an upload into Install's errors.
func (c *installCmd) checked(b Binary, plat Platform, remote string) error {
	err := c.wait()
	if err == nil {
		return nil
	}
	said := ""
	select {
	case <-c.read: // stdout ends with the command
		said = strings.TrimSpace(string(c.rest.Bytes()))
	case <-c.ctx.Done():
		// Stopped (cut, or timed out): stdout may still be being read
		// into rest, which must not be read meanwhile.
	}
	var ee *cluster.ExitError
	switch {
	case errors.As(err, &ee) && ee.Code == uploadFailed:
		msg := firstLine([]byte(c.stderr.String()))
		if msg == "" {
			msg = "the host could not write it"
		}
		return &uploadError{fmt.Errorf("%w: %s", err, msg)}
	case errors.As(err, &ee) && ee.Code == otherVersion:
		return &CannotRunError{Host: c.t.Host().Name, Platform: plat, Agent: b.Path, Remote: remote,
			Output: fmt.Sprintf("it answers %q, want %q", said, b.Version)}
	case errors.As(err, &ee) && ee.Code == cannotRun:
		if msg := firstLine([]byte(said)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return &CannotRunError{Host: c.t.Host().Name, Platform: plat, Agent: b.Path, Remote: remote, Err: err}
	}
	return &uploadError{err} // the connection, or the command stopped
}
