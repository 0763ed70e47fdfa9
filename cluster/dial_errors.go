package cluster

import (
	"errors"
	"fmt"
	"strings"
)

// The errors a dial returns, by what a caller does about them. A supervisor
// waits for an unreachable host (it may come back), but not for one that
// refuses drover's keys (AuthError) or presents a key it must not trust
// (HostKeyError): waiting would not change either. Callers tell them apart
// with errors.As, never by the text.

// AuthError says that the host was reached and its key verified, but it
// accepted none of the credentials drover offered.
type AuthError struct {
	User    string
	Tried   []string // "agent $SOCK (2 keys)", "/home/u/.ssh/id_ed25519"
	Skipped []string // "/x/id_rsa: encrypted (add it to ssh-agent)"
	Err     error    // what the SSH library or the host said, if anything
}

// Error does not repeat the host: Dial wraps it as "connect to NAME (ADDR): ...".
func (e *AuthError) Error() string {
	var parts []string
	if len(e.Tried) > 0 {
		parts = append(parts, "tried "+strings.Join(e.Tried, ", "))
	} else {
		parts = append(parts, "no usable key (set identity_file, or start ssh-agent and ssh-add a key)")
	}
	if len(e.Skipped) > 0 {
		parts = append(parts, "skipped "+strings.Join(e.Skipped, "; "))
	}
	return fmt.Sprintf("auth failed for user %q: %s", e.User, strings.Join(parts, "; "))
}

func (e *AuthError) Unwrap() error { return e.Err }

// UnreachableError says that no SSH connection could be set up for a
// reason of the network or the host's state: the TCP connect was refused or
// timed out, there is no route, or the connection broke or stalled before
// authentication (sshd starting, MaxStartups reached, a jump host that
// cannot reach the target). Such a host may come back.
type UnreachableError struct {
	Err error
}

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable wraps err as an *UnreachableError.
func unreachable(err error) error { return &UnreachableError{Err: err} }

// IsUnreachable reports whether err says a host could not be reached or its
// connection was lost (ErrConnectionLost), as opposed to a host that refused
// drover (AuthError, HostKeyError), a mistake in the configuration, or a
// cancelled context.
func IsUnreachable(err error) bool {
	var ue *UnreachableError
	return errors.As(err, &ue) || errors.Is(err, ErrConnectionLost)
}
