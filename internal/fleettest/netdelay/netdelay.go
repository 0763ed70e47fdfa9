// Package netdelay puts round-trip delay between a client and a TCP server
// on this machine: a userspace proxy that holds every chunk of bytes for a
// fixed time in each direction before passing it on, so that a test fleet
// whose hosts are network namespaces a few microseconds away behaves like
// one across a datacenter or a continent. Kernel netem is the usual tool,
// but it is not available on every machine the benchmarks run on.
//
// Delay is applied per chunk from the moment the proxy read it, not
// serialized: a chunk read while another waits is sent Delay after its own
// arrival, so delay adds latency without capping bandwidth, as a long link
// does. The proxy also counts turns (the direction of the traffic changing),
// so that a benchmark can say how many round trips an operation waited for
// whatever the delay.
package netdelay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the most one read takes; a chunk is the unit of delay.
const chunkSize = 32 << 10

// queueChunks is how many chunks may wait in one direction: beyond that the
// reader stops reading, and TCP's own flow control pushes back on the
// sender, as a full link would.
const queueChunks = 1024

// Direction is which way bytes go through the proxy.
type Direction int

const (
	// Up is from the client (who connected to the proxy) to the target.
	Up Direction = iota
	// Down is from the target back to the client.
	Down
)

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Stats is what went through a proxy since it started.
type Stats struct {
	Conns int64 // connections accepted
	// Bytes is the bytes forwarded in each direction (Up, Down).
	Bytes [2]int64
	// Turns is how often, within one connection, a chunk went the other
	// way from the one read before it: a request and its answer are two
	// turns, so an operation that waits for k replies in sequence makes
	// about 2k turns, however long the delay. Summed over connections.
	Turns int64
	// Waits is how often the client spoke again after having waited for
	// the target: a chunk going up that follows one that came down and
	// comes at least the one-way delay after the client's previous one
	// (the first chunk of a connection, which waited for the connect,
	// counts too). Requests sent back to back, or a stream of writes
	// with replies flowing back, are not waits. Summed over
	// connections; per connection it is the round trips the client sat
	// through, counted rather than timed.
	Waits int64
}

// clock is time as the proxy sees it; tests replace it to check the delay
// applied to every chunk without timing anything.
type clock interface {
	Now() time.Time
	// SleepUntil returns at t (at once if t has passed), or early when
	// cancel is closed.
	SleepUntil(t time.Time, d Direction, cancel <-chan struct{})
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) SleepUntil(t time.Time, _ Direction, cancel <-chan struct{}) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-cancel:
	}
}

// Proxy accepts connections on its own address and forwards each to the
// target, delaying every chunk by Delay in each direction.
type Proxy struct {
	delay  time.Duration
	target string
	ln     net.Listener
	clock  clock
	dial   func(addr string) (net.Conn, error)

	conns, up, down, turns, waits atomic.Int64

	mu     sync.Mutex
	open   map[*pair]bool
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on listen (e.g. "127.0.0.1:0") to target
// ("10.231.21.10:22") that adds oneWay to each direction, so a round trip
// through it takes 2*oneWay longer.
func Listen(listen, target string, oneWay time.Duration) (*Proxy, error) {
	return listen2(listen, target, oneWay, realClock{})
}

func listen2(listen, target string, oneWay time.Duration, c clock) (*Proxy, error) {
	if oneWay < 0 {
		return nil, fmt.Errorf("netdelay: negative delay %v", oneWay)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("netdelay: listen on %s for %s: %w", listen, target, err)
	}
	p := &Proxy{delay: oneWay, target: target, ln: ln, clock: c, open: map[*pair]bool{},
		dial: func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 10*time.Second) }}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), Bytes: [2]int64{p.up.Load(), p.down.Load()}, Turns: p.turns.Load(), Waits: p.waits.Load()}
}

// Close stops accepting, cuts every open connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.open {
		c.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// pair is one proxied connection: the client's and the target's.
type pair struct {
	client, target net.Conn
	cancel         chan struct{}
	once           sync.Once
	// last is the direction of the chunk read last (any: there was one);
	// lastUp when the client's last chunk came.
	mu     sync.Mutex
	last   Direction
	any    bool
	lastUp time.Time
}

func (c *pair) close() {
	c.once.Do(func() {
		close(c.cancel)
		c.client.Close()
		c.target.Close()
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	target, err := p.dial(p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &pair{client: client, target: target, cancel: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.open[c] = true
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, Up, client, target, &p.up) }()
	go func() { defer wg.Done(); p.pipe(c, Down, target, client, &p.down) }()
	wg.Wait()
	c.close()
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
}

// chunk is bytes read at one moment; nil data is the end of the stream.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk Delay after it was read. The end of
// src becomes a half-close of dst at the same delay; an error on either
// side cuts the whole connection.
func (p *Proxy) pipe(c *pair, d Direction, src, dst net.Conn, count *atomic.Int64) {
	q := make(chan chunk, queueChunks)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			now := p.clock.Now()
			if n > 0 {
				p.turn(c, d, now)
				select {
				case q <- chunk{data: buf[:n], due: now.Add(p.delay)}:
				case <-c.cancel:
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					select {
					case q <- chunk{due: now.Add(p.delay)}:
					case <-c.cancel:
					}
				} else {
					c.close()
				}
				return
			}
		}
	}()
	for ch := range q {
		p.clock.SleepUntil(ch.due, d, c.cancel)
		if ch.data == nil {
			if tc, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
			}
			continue
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close()
			for range q {
			}
			return
		}
		count.Add(int64(len(ch.data)))
	}
}

// turn counts a change of direction on c, and a wait (see Stats).
func (p *Proxy) turn(c *pair, d Direction, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.any && c.last != d {
		p.turns.Add(1)
	}
	if d == Up {
		if !c.any && c.lastUp.IsZero() || c.any && c.last == Down && now.Sub(c.lastUp) >= p.delay {
			p.waits.Add(1)
		}
		c.lastUp = now
	}
	c.last, c.any = d, true
}
