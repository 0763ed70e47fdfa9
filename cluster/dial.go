package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrConnectionLost is wrapped by the error Process.Wait returns when the
// connection to the host died (keepalives unanswered, TCP reset, transport
// closed) before the command's exit status arrived. The command may still be
// running on the host; callers treat the host as unreachable rather than the
// command as failed.
var ErrConnectionLost = errors.New("connection lost")

// IsConnectionLost reports whether err says that the connection to a host
// was lost, as opposed to a command that ran and failed (*ExitError).
func IsConnectionLost(err error) bool {
	return errors.Is(err, ErrConnectionLost)
}

// Defaults for DialOptions' zero values.
const (
	DefaultConnectTimeout    = 10 * time.Second
	DefaultKeepAliveInterval = 2 * time.Second
	DefaultKeepAliveCountMax = 3
	DefaultDialParallel      = 64
)

// DialOptions tune how hosts are reached. The zero value is usable: strict
// host key checking, ~/.ssh/config, $SSH_AUTH_SOCK and the defaults above.
type DialOptions struct {
	// AcceptNewHosts records the key of a host missing from known_hosts
	// and trusts it, like OpenSSH's StrictHostKeyChecking=accept-new. A
	// changed key is refused regardless.
	AcceptNewHosts bool
	// ConnectTimeout bounds TCP connect plus SSH handshake and auth, per
	// hop. Default 10s.
	ConnectTimeout time.Duration
	// KeepAliveInterval is how often keepalive@openssh.com requests are
	// sent; KeepAliveCountMax unanswered ones in a row mark the connection
	// lost, so a dead host is noticed within about Interval*(CountMax+1)
	// (defaults 2s and 3: 6-8s) instead of waiting for TCP to give up.
	// A negative interval disables keepalives.
	KeepAliveInterval time.Duration
	KeepAliveCountMax int
	// SSHConfigPath is the OpenSSH client config consulted for HostName,
	// User, Port, IdentityFile, UserKnownHostsFile and ProxyJump where the
	// inventory leaves them unset. Default ~/.ssh/config; "none" disables.
	SSHConfigPath string
	// AgentSocket is the ssh-agent socket whose keys are offered before
	// identity files. Default $SSH_AUTH_SOCK; "none" disables the agent.
	AgentSocket string
	// Inventory resolves a ProxyJump given as an inventory host name, so a
	// bastion can be described once with its own user, key and port.
	Inventory []Endpoint
	// Parallel bounds how many connections DialAll opens at once, so a
	// fleet of hundreds does not hit sshd's MaxStartups or the local file
	// limit. Default 64.
	Parallel int
	// KnownHosts, when set, lets every dial made with these options share
	// one parse of the known_hosts files; nil: each dial parses them.
	// DialEach and DialAll set one for their dials when it is nil.
	KnownHosts *KnownHosts
	// SSHConfigs, when set, lets every dial made with these options share
	// one reading of the ssh config (and what ssh -G said of each host);
	// DialEach and DialAll set one for their dials when it is nil.
	SSHConfigs *SSHConfigs
	// Jumps, when set, lets the dials made with these options share one
	// connection to each ProxyJump host (a bastion's sshd drops
	// concurrent handshakes past MaxStartups); DialEach and DialAll set
	// one for their dials when it is nil.
	Jumps *JumpHosts
	// OpenSSH is the OpenSSH client asked (ssh -G HOST) what an ssh config
	// that drover cannot evaluate itself (Match exec, Match final, ...)
	// resolves to for a host. Default "ssh" on $PATH; "none": never ask,
	// ignore such blocks with a warning.
	OpenSSH string
	// Warn receives, once each, the problems a dial works around rather
	// than fails on: a known_hosts line it cannot read (skipped, as
	// OpenSSH does), an ssh_config block it cannot evaluate. Nil: they
	// are written to standard error.
	Warn func(msg string)
	// Dialers reach hosts of transports that other packages provide, by
	// Endpoint.Transport: "slurm" (package cluster/slurm) needs the
	// allocation drover runs in, which only the caller knows.
	Dialers map[string]func(ctx context.Context, h Endpoint) (Transport, error)
}

func (o DialOptions) withDefaults() DialOptions {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.KeepAliveInterval == 0 {
		o.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if o.KeepAliveCountMax <= 0 {
		o.KeepAliveCountMax = DefaultKeepAliveCountMax
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultDialParallel
	}
	if o.Warn == nil {
		o.Warn = func(msg string) { fmt.Fprintf(os.Stderr, "drover: warning: %s\n", msg) }
	}
	return o
}

// Dial opens the one connection through which every command and file
// operation on h goes: SSH (with SFTP opened lazily on it) or, for
// Transport "local", this machine. Errors name the host and address and say
// why (timeout, refused, authentication, host key).
func Dial(ctx context.Context, h Endpoint, opts DialOptions) (Transport, error) {
	opts = opts.withDefaults()
	if d, ok := opts.Dialers[h.Transport]; ok {
		return d(ctx, h)
	}
	switch h.Transport {
	case TransportLocal:
		return NewLocal(h)
	case TransportSSH, "":
		return dialSSH(ctx, h, opts)
	default:
		return nil, fmt.Errorf("connect to %s: unknown transport %q (want %q or %q)", h.Name, h.Transport, TransportSSH, TransportLocal)
	}
}

// Shared returns o with a cache for each of KnownHosts, SSHConfigs and
// Jumps that is nil, so that the dials made with the result read
// known_hosts and the ssh config once, warn once, and share one connection
// to each jump host. DialEach and DialAll use it; so should a caller that
// dials many hosts one Dial at a time.
func (o DialOptions) Shared() DialOptions {
	if o.KnownHosts == nil {
		o.KnownHosts = &KnownHosts{}
	}
	if o.SSHConfigs == nil {
		o.SSHConfigs = &SSHConfigs{}
	}
	if o.Jumps == nil {
		o.Jumps = &JumpHosts{}
	}
	return o
}

// DialAll dials every host at once, at most opts.Parallel at a time, and
// returns the transports and errors in the order of hosts: for each i
// exactly one of ts[i] and errs[i] is non-nil. One unreachable host never
// delays the others beyond its own connect timeout.
func DialAll(ctx context.Context, hosts []Endpoint, opts DialOptions) ([]Transport, []error) {
	ts := make([]Transport, len(hosts))
	errs := make([]error, len(hosts))
	DialEach(ctx, hosts, opts, func(i int, t Transport, err error) {
		ts[i], errs[i] = t, err
	})
	return ts, errs
}

// DialEach dials every host like DialAll but hands each host to fn as soon
// as its own dial is done, in that host's goroutine, so that work on a host
// does not wait for the slowest handshake of the fleet (for a push that
// changes nothing, the wait was a third of the time). Exactly one of t and
// err is non-nil; fn owns t. DialEach returns when every fn has returned.
// The opts.Parallel limit covers the dials only, not fn.
func DialEach(ctx context.Context, hosts []Endpoint, opts DialOptions, fn func(i int, t Transport, err error)) {
	opts = opts.withDefaults()
	opts = opts.Shared()
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				fn(i, nil, fmt.Errorf("connect to %s: %w", h.Name, ctx.Err()))
				return
			}
			t, err := Dial(ctx, h, opts)
			<-sem
			if err != nil {
				t = nil
			}
			fn(i, t, err)
		}()
	}
	wg.Wait()
}
