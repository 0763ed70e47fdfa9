package cluster

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestQuickAckConn: the wrapper passes data through both ways, leaves the
// socket acknowledging at once after every read, and leaves other kinds
// of connection alone. (What it saves, a delayed-ACK stall per connection,
// shows in make bench's fan-out: one host's `drover exec` went from 80 ms
// to 40 ms.)
func TestQuickAckConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := quickAck(raw)
	defer c.Close()
	require.IsType(t, &quickAckConn{}, c)
	for _, msg := range []string{"SSH-2.0-test\r\n", "second", "third"} {
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		buf := make([]byte, len(msg))
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		assert.Equal(t, msg, string(buf))
		v, err := quickAckOpt(t, raw.(*net.TCPConn))
		require.NoError(t, err)
		assert.Equal(t, 1, v, "TCP_QUICKACK after a read")
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Equal(t, a, quickAck(a), "not TCP: unchanged")
}

func quickAckOpt(t *testing.T, c *net.TCPConn) (int, error) {
	t.Helper()
	raw, err := c.SyscallConn()
	require.NoError(t, err)
	var v int
	var gerr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK)
	}))
	return v, gerr
}
