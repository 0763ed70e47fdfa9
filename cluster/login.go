package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LoginMarker is what a command drover runs prints first, so that
// whatever comes before it on stdout is known to be the login shell's:
// sshd runs every command, SFTP included, through the user's shell, and
// its rc files (and ~/.ssh/rc) print onto the same stream.
const LoginMarker = "drover-ran"

// LoginShellError is a host whose login shell gets in the way of a
// non-interactive session: it printed output before the command (which
// SFTP then reads as a packet: "packet too long"), or it exited without
// running it (a nologin or /bin/false shell, an `exit` in an rc file:
// SFTP sees "unexpected EOF").
type LoginShellError struct {
	Host    string
	Printed string // the first bytes, escaped and bounded; "" when none
	Exited  bool   // the command never ran
	Err     error  // how the session ended, when it did not end well
}

func (e *LoginShellError) Error() string {
	msg := fmt.Sprintf("%s: the login shell printed output for a non-interactive session before running drover's command: \"%s\"", e.Host, e.Printed)
	if e.Exited {
		msg = fmt.Sprintf("%s: the login shell exited for a non-interactive session without running drover's command", e.Host)
		if e.Err != nil {
			msg += fmt.Sprintf(" (%v)", e.Err)
		}
		if e.Printed != "" {
			msg += fmt.Sprintf(", printing \"%s\"", e.Printed)
		}
		return msg + "; a nologin or /bin/false shell, or an `exit` in .bashrc, .profile or ~/.ssh/rc, does this (OpenSSH FAQ: sftp/scp need a shell that runs the command silently)"
	}
	return msg + "; SFTP and drover read that as the command's own output. Make the rc files print only in interactive shells (`case $- in *i*) ;; *) return;; esac` at the top of .bashrc), as OpenSSH's FAQ asks for sftp and scp"
}

// loginCheckWait bounds CheckLogin: one command's round trips.
const loginCheckWait = 15 * time.Second

// CheckLogin runs `echo LoginMarker` through the host's login shell and
// returns a *LoginShellError when the shell printed before it or exited
// without running it; nil when the shell is quiet (or when it cannot
// tell: the connection failed, which the caller's own error says). Drover
// runs it to explain a failure (SFTP that would not start), not before
// every command: a quiet shell is the usual case.
func CheckLogin(ctx context.Context, t Transport) error {
	ctx, cancel := context.WithTimeout(ctx, loginCheckWait)
	defer cancel()
	out := NewHeadBuffer(QuoteLimit, cancel)
	p, err := t.Start(ctx, Cmd{Shell: "echo " + LoginMarker, Stdout: out, Stderr: out})
	if err != nil {
		return nil
	}
	werr := p.Wait()
	return LoginOutput(t.Host().Name, out.Bytes(), out.More(), werr)
}

// LoginOutput judges what a command that prints LoginMarker first wrote
// to stdout (b, with more bytes not kept) and how it ended (werr).
func LoginOutput(host string, b []byte, more int64, werr error) error {
	i := indexLine(b, LoginMarker)
	switch {
	case i == 0:
		return nil
	case i > 0:
		return &LoginShellError{Host: host, Printed: QuoteHost(b[:i], 0, QuoteLimit)}
	case more > 0:
		return &LoginShellError{Host: host, Printed: QuoteHost(b, more, QuoteLimit)}
	}
	var ee *ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return nil // the connection or the context: not the shell's doing
	}
	return &LoginShellError{Host: host, Printed: QuoteHost(b, more, QuoteLimit), Exited: true, Err: werr}
}

// indexLine is where the line holding exactly line starts in b, -1 when
// none does.
func indexLine(b []byte, line string) int {
	for start := 0; start < len(b); {
		end := start
		for end < len(b) && b[end] != '\n' {
			end++
		}
		if string(b[start:end]) == line {
			return start
		}
		start = end + 1
	}
	return -1
}
