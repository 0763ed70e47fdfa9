package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Through a bastion, a fleet dial used to open one SSH connection to the
// bastion per target: 64 hosts meant 64 handshakes at once on the bastion,
// whose sshd by default (MaxStartups 10:30:100) drops 30% of the new
// connections beyond 10 still authenticating, more as they pile up. A
// JumpHosts shares one connection per jump host among the dials, opens at
// most jumpOpens channels through it at a time, and retries what the
// bastion refuses for the moment.

// jumpOpens bounds the direct-tcpip channels being opened at once through
// one shared jump connection (each makes the bastion connect to a target).
const jumpOpens = 8

// jumpRetryFirst is the first pause before dialling a jump host again after
// it hung up during the handshake (MaxStartups); it doubles each time, and
// the retries stop at the connect timeout.
const jumpRetryFirst = 200 * time.Millisecond

// JumpHosts shares one connection to each ProxyJump host among the dials
// that use it (DialOptions.Jumps): it is opened by the first dial that needs
// it and closed when the last transport through it closes. The zero value
// is ready to use, by many goroutines at once.
type JumpHosts struct {
	mu    sync.Mutex
	conns map[string]*sharedJump
}

// sharedJump is one jump host's connection and who uses it.
type sharedJump struct {
	ready   chan struct{} // closed once dialled (client or err set)
	client  *ssh.Client
	release func() // closes client and its own hops
	err     error
	refs    int
	opens   chan struct{} // semaphore: channel opens in flight
	dead    chan struct{} // closed when the connection ends
}

// jumpConn is a connection to a jump host held by one dial; done gives it
// back (closing it when nobody else holds it).
type jumpConn struct {
	client *ssh.Client
	opens  chan struct{} // nil: no limit
	done   func()
}

// acquire returns the shared connection to jh, dialling it (with dial)
// when there is none or the last one died.
func (p *JumpHosts) acquire(ctx context.Context, jh Endpoint, dial func() (*ssh.Client, func(), error)) (*jumpConn, error) {
	key := fmt.Sprintf("%+v", jh)
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[string]*sharedJump{}
	}
	sj, ok := p.conns[key]
	if ok && sj.isDead() {
		delete(p.conns, key)
		ok = false
	}
	if !ok {
		sj = &sharedJump{ready: make(chan struct{}), opens: make(chan struct{}, jumpOpens), dead: make(chan struct{})}
		p.conns[key] = sj
		go func() {
			sj.client, sj.release, sj.err = dial()
			if sj.err == nil {
				go func() { _ = sj.client.Wait(); close(sj.dead) }()
			} else {
				close(sj.dead)
			}
			close(sj.ready)
		}()
	}
	sj.refs++
	p.mu.Unlock()

	put := func() {
		p.mu.Lock()
		sj.refs--
		last := sj.refs == 0
		if last && p.conns[key] == sj {
			delete(p.conns, key)
		}
		p.mu.Unlock()
		if last {
			<-sj.ready // not under the lock: other jump hosts go on
			if sj.err == nil {
				sj.release()
			}
		}
	}
	select {
	case <-sj.ready:
	case <-ctx.Done():
		go put() // after the dial ends
		return nil, ctx.Err()
	}
	if sj.err != nil {
		put()
		return nil, sj.err
	}
	var once sync.Once
	return &jumpConn{client: sj.client, opens: sj.opens, done: func() { once.Do(put) }}, nil
}

func (sj *sharedJump) isDead() bool {
	select {
	case <-sj.ready:
	default:
		return false // still dialling: share it
	}
	select {
	case <-sj.dead:
		return true
	default:
		return false
	}
}

// openThrough opens a direct-tcpip channel to addr through the jump
// connection, at most jumpOpens at a time on a shared one, retrying a
// refusal for want of resources (the bastion at a limit) with backoff
// until timeout.
func (j *jumpConn) openThrough(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if j.opens != nil {
		select {
		case j.opens <- struct{}{}:
			defer func() { <-j.opens }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	delay := 50 * time.Millisecond
	for {
		conn, err := j.client.DialContext(ctx, "tcp", addr)
		var oce *ssh.OpenChannelError
		if err == nil || !errors.As(err, &oce) || oce.Reason != ssh.ResourceShortage {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// retryJumpDial dials a jump host again while it hangs up during the
// handshake (EOF or a reset: what sshd does to a connection past
// MaxStartups), with backoff, within timeout. A refused or timed-out TCP
// connect, or a refusal of drover's keys, is not retried.
func retryJumpDial(ctx context.Context, timeout time.Duration, dial func() (*ssh.Client, func(), error)) (*ssh.Client, func(), error) {
	deadline := time.Now().Add(timeout)
	delay := jumpRetryFirst
	for {
		c, release, err := dial()
		hungUp := IsUnreachable(err) && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
		if err == nil || !hungUp || time.Now().Add(delay).After(deadline) {
			return c, release, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(delay):
		}
		delay *= 2
	}
}
