package netdelay

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock stands still and records every wait the proxy asks for, so
// the delay applied to each chunk is checked without timing anything.
type fakeClock struct {
	t0    time.Time
	mu    sync.Mutex
	waits [2][]time.Duration // per Direction: due - the time the chunk was read
}

func (f *fakeClock) Now() time.Time { return f.t0 }

func (f *fakeClock) SleepUntil(t time.Time, d Direction, _ <-chan struct{}) {
	f.mu.Lock()
	f.waits[d] = append(f.waits[d], t.Sub(f.t0))
	f.mu.Unlock()
}

// server accepts one connection and runs fn on it.
func server(t *testing.T, fn func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fn(c)
	}()
	return ln.Addr().String()
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// TestBytesIntactAndDelayedEachWay: a megabyte each way arrives unchanged,
// a half-close passes through (the server answers after the client's EOF),
// and every chunk in each direction, the EOF included, is held for exactly
// the one-way delay.
func TestBytesIntactAndDelayedEachWay(t *testing.T) {
	up, down := randomBytes(t, 1<<20), randomBytes(t, 1<<20+7)
	var gotUp []byte
	addr := server(t, func(c net.Conn) {
		gotUp, _ = io.ReadAll(c) // until the client's half-close
		_, _ = c.Write(down)
	})
	clk := &fakeClock{t0: time.Unix(1000, 0)}
	const oneWay = 25 * time.Millisecond
	p, err := listen2("127.0.0.1:0", addr, oneWay, clk)
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(up)
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	gotDown, err := io.ReadAll(c)
	require.NoError(t, err)

	assert.True(t, bytes.Equal(up, gotUp), "client to server: %d bytes sent, %d arrived", len(up), len(gotUp))
	assert.True(t, bytes.Equal(down, gotDown), "server to client: %d bytes sent, %d arrived", len(down), len(gotDown))
	require.NoError(t, p.Close())
	st := p.Stats()
	assert.Equal(t, [2]int64{int64(len(up)), int64(len(down))}, st.Bytes)
	assert.EqualValues(t, 1, st.Conns)
	clk.mu.Lock()
	defer clk.mu.Unlock()
	for _, d := range []Direction{Up, Down} {
		// At least one chunk per 32 KiB, plus the EOF.
		assert.GreaterOrEqual(t, len(clk.waits[d]), 1<<20/chunkSize+1, "chunks delayed %s", d)
		for i, w := range clk.waits[d] {
			if w != oneWay {
				t.Fatalf("%s chunk %d held for %v, want %v", d, i, w, oneWay)
			}
		}
	}
}

// TestTurnsCountRoundTrips: k requests each waiting for its answer are
// 2k-1 changes of direction and k waits, whatever the delay; data in one
// direction only is no turn and one wait (the connect). The client's next
// request follows the answer, which the proxy held for the delay in each
// direction, so its gap to the previous request is at least twice the delay
// by construction: the counts do not depend on how fast the machine is.
func TestTurnsCountRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name      string
		k         int
		wantTurns int64
	}{
		{"one exchange", 1, 1},
		{"five exchanges", 5, 9},
		{"twenty exchanges", 20, 39},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := server(t, func(c net.Conn) {
				buf := make([]byte, 4)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
			p, err := Listen("127.0.0.1:0", addr, time.Millisecond)
			require.NoError(t, err)
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr().String())
			require.NoError(t, err)
			for i := 0; i < tc.k; i++ {
				_, err := c.Write([]byte("ping"))
				require.NoError(t, err)
				got := make([]byte, 4)
				_, err = io.ReadFull(c, got)
				require.NoError(t, err)
				assert.Equal(t, "ping", string(got))
			}
			c.Close()
			require.NoError(t, p.Close())
			assert.Equal(t, tc.wantTurns, p.Stats().Turns)
			assert.EqualValues(t, tc.k, p.Stats().Waits)
		})
	}
	t.Run("one way only", func(t *testing.T) {
		got := make(chan int64, 1)
		addr := server(t, func(c net.Conn) {
			n, _ := io.Copy(io.Discard, c)
			got <- n
		})
		p, err := Listen("127.0.0.1:0", addr, 0)
		require.NoError(t, err)
		defer p.Close()
		c, err := net.Dial("tcp", p.Addr().String())
		require.NoError(t, err)
		for i := 0; i < 10; i++ {
			_, err := c.Write(randomBytes(t, 1000))
			require.NoError(t, err)
		}
		c.Close()
		assert.EqualValues(t, 10000, <-got, "bytes through")
		require.NoError(t, p.Close())
		assert.Zero(t, p.Stats().Turns)
		assert.EqualValues(t, 1, p.Stats().Waits)
	})
}

// TestCloseCutsOpenConnections: Close ends connections still open (the
// client sees EOF or a reset, not a hang) and returns only when every
// goroutine is done.
func TestCloseCutsOpenConnections(t *testing.T) {
	hold := make(chan struct{})
	addr := server(t, func(c net.Conn) { <-hold })
	defer close(hold)
	p, err := Listen("127.0.0.1:0", addr, time.Hour)
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("held for an hour"))
	require.NoError(t, err)
	require.NoError(t, p.Close())
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err, "read from a cut connection")
}

func TestNegativeDelay(t *testing.T) {
	_, err := Listen("127.0.0.1:0", "127.0.0.1:1", -time.Second)
	assert.ErrorContains(t, err, "negative delay")
}

// TestPipelinedRequestsAreOneWait: requests sent back to back, answered
// together, are one wait, however many turns their answers make.
func TestPipelinedRequestsAreOneWait(t *testing.T) {
	const k = 8
	addr := server(t, func(c net.Conn) {
		buf := make([]byte, 4*k)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		_, _ = c.Write(buf)
		_, _ = io.Copy(io.Discard, c)
	})
	p, err := Listen("127.0.0.1:0", addr, 5*time.Millisecond)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr().String())
	require.NoError(t, err)
	for i := 0; i < k; i++ {
		_, err := c.Write([]byte("ping"))
		require.NoError(t, err)
	}
	_, err = io.ReadFull(c, make([]byte, 4*k))
	require.NoError(t, err)
	c.Close()
	require.NoError(t, p.Close())
	assert.EqualValues(t, 1, p.Stats().Waits)
}
