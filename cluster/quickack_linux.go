package cluster

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAck makes the kernel acknowledge every segment drover receives on
// conn at once instead of holding the ACK back for up to 40 ms (Linux's
// delayed ACK). sshd writes with Nagle's algorithm on until a session
// starts, so between authentication and the first session it holds its
// channel-open confirmation until our ACK of its previous packet arrives:
// with delayed ACK that cost every connection a 40 ms stall, half of a
// one-host `drover exec` on a LAN. The flag does not stick (the kernel
// drops back to delayed ACK on its own), so it is set again after every
// read; that is one setsockopt per read, nothing next to the read.
func quickAck(conn net.Conn) net.Conn {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return conn
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return conn
	}
	c := &quickAckConn{TCPConn: tc, raw: raw}
	c.set()
	return c
}

type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if n > 0 {
		c.set()
	}
	return n, err
}

func (c *quickAckConn) set() {
	_ = c.raw.Control(func(fd uintptr) {
		// Best effort: a failure only brings the delay back.
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
