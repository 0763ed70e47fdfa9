package nccldiag

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// report is what NCCL 2.24's RAS answers STATUS with, shortened, for a
// job one of whose communicators has ranks at different collectives.
const report = `Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          4            1          8        8

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         4         8         8   RUNNING  MISMATCH

Errors
======

#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different collective operation counts
  7 ranks have launched up to operation 6650
  1 rank has launched up to operation 6652
`

// standIn serves NCCL's RAS client protocol on 127.0.0.1 with serve
// taking over after the handshake (nil: the honest server, answering
// report), and records the lines it was sent.
type standIn struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []string
}

func startStandIn(t *testing.T, handshake bool, serve func(c net.Conn, r *bufio.Reader)) *standIn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &standIn{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if handshake {
					if !s.expect(r, "CLIENT PROTOCOL 2") {
						return
					}
					io.WriteString(c, "SERVER PROTOCOL 2\n")
					if !s.expect(r, "TIMEOUT 5") {
						return
					}
					io.WriteString(c, "OK\n")
				}
				serve(c, r)
			}()
		}
	}()
	return s
}

func (s *standIn) expect(r *bufio.Reader, want string) bool {
	line, err := r.ReadString('\n')
	s.mu.Lock()
	s.lines = append(s.lines, strings.TrimRight(line, "\n"))
	s.mu.Unlock()
	return err == nil && strings.TrimRight(line, "\n") == want
}

func (s *standIn) addr() string { return s.ln.Addr().String() }

func honest(c net.Conn, r *bufio.Reader) {
	if line, _ := r.ReadString('\n'); line == "STATUS\n" || line == "VERBOSE STATUS\n" {
		io.WriteString(c, report)
	}
}

func TestQueryHonest(t *testing.T) {
	s := startStandIn(t, true, honest)
	got, err := Query(context.Background(), s.addr(), RASOptions{})
	require.NoError(t, err)
	assert.Equal(t, strings.TrimRight(report, "\n"), got)
	assert.Equal(t, []string{"CLIENT PROTOCOL 2", "TIMEOUT 5"}, s.lines, "ncclras's handshake")
	assert.Equal(t, "#0-0 (27a079b828ff1a75) MISMATCH / Communicator ranks have different collective operation counts / "+
		"7 ranks have launched up to operation 6650 / 1 rank has launched up to operation 6652", Short(got))
}

// TestQueryNoRAS: nothing listening (an NCCL before 2.24, RAS off, the
// group gone) and a server that does not speak the protocol are a
// NoRASError, which the hang verdict stays quiet about.
func TestQueryNoRAS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	httpish := startStandIn(t, false, func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\n")
	})
	endlessLine := startStandIn(t, false, func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		for {
			if _, err := io.WriteString(c, strings.Repeat("A", 4096)); err != nil {
				return
			}
		}
	})
	badTimeout := startStandIn(t, false, func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		io.WriteString(c, "SERVER PROTOCOL 3\n")
		r.ReadString('\n')
		io.WriteString(c, "ERROR unknown command\n")
	})
	for name, addr := range map[string]string{"refused": closed, "http": httpish.addr(), "endless line": endlessLine.addr(), "no OK": badTimeout.addr()} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := Query(context.Background(), addr, RASOptions{Timeout: 5 * time.Second})
			var no *NoRASError
			require.True(t, errors.As(err, &no), "%v", err)
			assert.Less(t, time.Since(start), 4*time.Second)
		})
	}
}

// TestQueryHostile: a server that talks without end is cut at the limit;
// one that trickles is cut at the deadline with what it said so far;
// one that never answers is bounded by the deadline; control characters
// (a terminal's escape sequences) never come through.
func TestQueryHostile(t *testing.T) {
	endless := startStandIn(t, true, func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		for {
			if _, err := io.WriteString(c, "all is \x1b[31mwell\x1b[0m\r\n"); err != nil {
				return
			}
		}
	})
	got, err := Query(context.Background(), endless.addr(), RASOptions{Limit: 1000})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(got), 1100)
	assert.Contains(t, got, "all is [31mwell[0m\n")
	assert.NotContains(t, got, "\x1b")
	assert.NotContains(t, got, "\r")
	assert.True(t, strings.HasSuffix(got, "[drover: the report was cut at 1000 bytes]"), got)

	slow := startStandIn(t, true, func(c net.Conn, r *bufio.Reader) {
		r.ReadString('\n')
		for {
			if _, err := io.WriteString(c, "x"); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	start := time.Now()
	got, err = Query(context.Background(), slow.addr(), RASOptions{Timeout: time.Second})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.True(t, strings.HasPrefix(got, "xx"), got)
	assert.Contains(t, got, "[drover: the report was cut:")

	silent := startStandIn(t, false, func(c net.Conn, r *bufio.Reader) { io.Copy(io.Discard, r) })
	start = time.Now()
	_, err = Query(context.Background(), silent.addr(), RASOptions{Timeout: 500 * time.Millisecond})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start = time.Now()
	_, err = Query(ctx, silent.addr(), RASOptions{Timeout: time.Minute})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second, "a cancelled context ends the query")
}

func TestShort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"Errors\n======\n\nWarnings\n========\n", "no errors"},
		{"Errors\n======\n\nWarnings\n========\n  rank 3 is slow\n", "no errors; warnings: / rank 3 is slow"},
		{"something\nelse\nthan\na report\n", "something / else / than"},
		{"Errors\n======\n" + strings.Repeat("bad ", 200), strings.Repeat("bad ", 75) + "..."},
		{"Errors\n======\n\x1b]0;pwned\x07rank 1 dead\n", "]0;pwnedrank 1 dead"},
	} {
		assert.Equal(t, tc.want, Short(tc.in), "%q", tc.in)
	}
}
