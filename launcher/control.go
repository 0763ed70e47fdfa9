package launcher

import (
	"io"
	"sync"
)

// control is the stdin of one remote agent: drover writes "stop" or "kill"
// lines to it, and closing it (EOF) tells the agent that drover is gone.
// Sends never block, so a dead connection cannot wedge the supervisor.
type control struct {
	ch     chan []byte
	once   sync.Once
	closed chan struct{}
	buf    []byte
}

func newControl() *control {
	return &control{ch: make(chan []byte, 16), closed: make(chan struct{})}
}

// Send queues one control line; it is dropped if the queue is full (the
// agent already has a stop request pending) or the control is closed.
func (c *control) Send(line string) {
	select {
	case <-c.closed:
		return
	default:
	}
	select {
	case c.ch <- []byte(line + "\n"):
	default:
	}
}

// Ping queues a heartbeat unless lines are already waiting (they count as
// a heartbeat too), so pings never crowd out a stop or kill request.
func (c *control) Ping() {
	if len(c.ch) == 0 {
		c.Send("ping")
	}
}

// Close makes the agent's stdin reach EOF.
func (c *control) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// Read implements io.Reader for the transport's stdin copier.
func (c *control) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		select {
		case b := <-c.ch:
			c.buf = b
		case <-c.closed:
			// Deliver what was queued before the close, then EOF.
			select {
			case b := <-c.ch:
				c.buf = b
			default:
				return 0, io.EOF
			}
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}
