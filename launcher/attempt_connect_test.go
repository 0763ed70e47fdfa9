package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// fakeClock is a clock whose sleeps pass at once and move its time on.
type fakeClock struct{ t time.Time }

func (c *fakeClock) clock() clock {
	return clock{now: func() time.Time { return c.t }, sleep: func(ctx context.Context, d time.Duration) error {
		c.t = c.t.Add(d)
		return ctx.Err()
	}}
}

// TestConnectNeverReached: a host whose address never took a TCP
// connection from this run (refused, no route, timed out) fails the
// attempt at once, naming host, address and fix, or is replaced by a
// spare at once, however long host_wait is; a host the run reached
// before, or one whose handshake broke (the host answered), is waited
// for host_wait, with a line every 30 s saying how long is left.
func TestConnectNeverReached(t *testing.T) {
	refused := fmt.Errorf("connect to b (b.local): %w", &cluster.UnreachableError{Err: fmt.Errorf(
		"connection refused (is sshd listening on that port?): %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})})
	handshake := fmt.Errorf("connect to b (b.local): %w", &cluster.UnreachableError{Err: errors.New("ssh: handshake failed: EOF")})
	for _, tc := range []struct {
		name      string
		err       error
		spare     bool
		reached   bool // an earlier attempt of the run connected to b
		wantDials int  // of b
		wantErr   []string
		wantEvent []string
		noEvent   []string
	}{
		{name: "never reached", err: refused, wantDials: 1,
			wantErr: []string{"connection refused", "b (b.local) was never reached by this run", "check its address and port in /job/hosts.toml (`ssh b.local` must connect)"},
			noEvent: []string{"waiting up to"}},
		{name: "never reached, spare", err: refused, spare: true, wantDials: 1,
			wantEvent: []string{"attempt 1/1: b (b.local) unreachable and never reached by this run: connect to b (b.local): connection refused (is sshd listening on that port?): dial tcp: connection refused; replaced by spare s (s.local)\n"},
			noEvent:   []string{"waiting up to"}},
		{name: "reached before", err: refused, reached: true, wantDials: 1 + 35,
			wantErr: []string{"connection refused"},
			wantEvent: []string{"attempt 1/1: b (b.local) unreachable, waiting up to 1m10s for it: ",
				"attempt 1/1: still waiting for b (b.local), 40s left\n", "attempt 1/1: still waiting for b (b.local), 10s left\n"}},
		{name: "handshake broke", err: handshake, wantDials: 1 + 35,
			wantErr: []string{"handshake failed"}, wantEvent: []string{"waiting up to 1m10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{InventoryPath: "/job/hosts.toml", Job: config.Job{HostWait: 70 * time.Second},
				Hosts: []config.Host{localHost("a", false), localHost("b", false)}}
			if tc.spare {
				cfg.Hosts = append(cfg.Hosts, localHost("s", true))
			}
			var buf bytes.Buffer
			d := &fakeDialer{down: map[string]error{"b": tc.err}}
			pool := newConnPool()
			defer pool.closeAll()
			if tc.reached {
				pool.reached["b"] = true
			}
			p := newTestConnect(cfg, d, pool, &buf)
			fc := &fakeClock{t: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
			p.clock = fc.clock()
			err := p.run(context.Background(), &attemptState{hosts: cfg.Hosts[:2]})
			if len(tc.wantErr) > 0 {
				require.Error(t, err)
				for _, w := range tc.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				if !strings.Contains(tc.name, "never") {
					assert.NotContains(t, err.Error(), "never reached")
				}
			} else {
				require.NoError(t, err)
			}
			for _, w := range tc.wantEvent {
				assert.Contains(t, buf.String(), w)
			}
			for _, w := range tc.noEvent {
				assert.NotContains(t, buf.String(), w)
			}
			assert.Equal(t, tc.wantDials, d.dials["b"], "dials of b")
			assert.True(t, pool.wasReached("a"), "a connection made is remembered")
		})
	}
}

// Issue 41: a host the run reached before that stays unreachable for
// host_wait with no spare is left out while min_hosts hosts remain; the
// next attempt dials it once (not host_wait again) and leaves it out
// again, and once it answers it rejoins. Without min_hosts, or below it,
// the attempt fails as before.
func TestConnectShrinksAndRejoins(t *testing.T) {
	refused := fmt.Errorf("connect to c (c.local): %w", &cluster.UnreachableError{Err: fmt.Errorf(
		"connection refused: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})})
	for _, tc := range []struct {
		name     string
		minHosts int
		wantErr  string
	}{
		{name: "min_hosts 2", minHosts: 2},
		{name: "min_hosts unset", minHosts: 0, wantErr: "no spare host left"},
		{name: "min_hosts 3", minHosts: 3, wantErr: "2 host(s) left, fewer than min_hosts = 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{InventoryPath: "/job/hosts.toml", Job: config.Job{HostWait: 10 * time.Second, MinHosts: tc.minHosts},
				Hosts: []config.Host{localHost("a", false), localHost("b", false), localHost("c", false)}}
			var buf bytes.Buffer
			d := &fakeDialer{down: map[string]error{"c": refused}}
			pool := newConnPool()
			defer pool.closeAll()
			pool.reached["c"] = true
			p := newTestConnect(cfg, d, pool, &buf)
			fc := &fakeClock{t: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
			p.clock = fc.clock()
			st := &attemptState{hosts: cfg.Hosts}
			err := p.run(context.Background(), st)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Contains(t, err.Error(), "connection refused")
				assert.Empty(t, p.left)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"a", "b"}, hostNames(st.cfg.Hosts), "the attempt runs on the hosts left")
			assert.Equal(t, map[string]bool{"c": true}, p.left)
			assert.Contains(t, buf.String(), "attempt 1/1: going on without c (unreachable for host_wait 10s and no spare left: connect to c (c.local): connection refused")
			assert.Contains(t, buf.String(), "): 2 of 3 hosts, min_hosts = 2;")
			waited := d.dials["c"]
			assert.Greater(t, waited, 1, "waited for host_wait first")

			// The next attempt: c is still gone, dialled once.
			buf.Reset()
			st = &attemptState{hosts: cfg.Hosts}
			require.NoError(t, p.run(context.Background(), st))
			assert.Equal(t, []string{"a", "b"}, hostNames(st.cfg.Hosts))
			assert.Equal(t, waited+1, d.dials["c"], "a host left out is not waited for again")
			assert.NotContains(t, buf.String(), "waiting up to")

			// c answers: it rejoins.
			buf.Reset()
			d.mu.Lock()
			delete(d.down, "c")
			d.mu.Unlock()
			st = &attemptState{hosts: cfg.Hosts}
			require.NoError(t, p.run(context.Background(), st))
			assert.Equal(t, []string{"a", "b", "c"}, hostNames(st.cfg.Hosts))
			assert.Empty(t, p.left)
			assert.Contains(t, buf.String(), "attempt 1/1: c (c.local) answers again: it rejoins the group")
		})
	}
}

func hostNames(hosts []config.Host) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, h.Name)
	}
	return out
}

// Issue 41, regrow = "checkpoint": the hosts left out are dialled only
// when a new checkpoint appears, the first that answers is sent once, and
// a host the health gate keeps out is never dialled.
func TestWatchRegrow(t *testing.T) {
	cfg := &config.Config{Job: config.Job{Regrow: config.RegrowCheckpoint},
		Hosts: []config.Host{localHost("a", false), localHost("b", false), localHost("c", false)}}
	var buf bytes.Buffer
	down := fmt.Errorf("connect to c: %w", &cluster.UnreachableError{Err: errors.New("i/o timeout")})
	d := &fakeDialer{down: map[string]error{"c": down}}
	p := newTestConnect(cfg, d, newConnPool(), &buf)
	p.left["b"], p.left["c"] = true, true
	p.fenced = func(h string) bool { return h == "b" }
	var mu sync.Mutex
	seq := 3
	newest := func() int { mu.Lock(); defer mu.Unlock(); return seq }
	setSeq := func(n int) { mu.Lock(); seq = n; mu.Unlock() }
	dials := func() int { d.mu.Lock(); defer d.mu.Unlock(); return d.dials["c"] + d.dials["b"] }
	ticks := make(chan struct{})
	p.clock.sleep = func(ctx context.Context, _ time.Duration) error {
		select {
		case ticks <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	back, stop := p.watchRegrow(context.Background(), newest)
	defer stop()
	tick := func() { <-ticks }
	tick()
	tick() // the first tick's look is done once the second is taken
	assert.Zero(t, dials(), "no new checkpoint: nothing dialled")
	setSeq(4)
	tick()
	tick()
	assert.Equal(t, 1, d.dials["c"], "a new checkpoint: the host left out dialled once")
	assert.Zero(t, d.dials["b"], "a host the health gate keeps out is not dialled")
	d.mu.Lock()
	delete(d.down, "c")
	d.mu.Unlock()
	tick()
	tick()
	assert.Equal(t, 1, d.dials["c"], "it answers now, but no newer checkpoint: not dialled")
	setSeq(5)
	// The look after the last tick runs beside this test and may see the
	// new checkpoint already (it then dials, sends and ends: no tick is
	// taken again); else the next tick's look does.
	select {
	case h := <-back:
		assert.Equal(t, "c", h)
	case <-ticks:
		assert.Equal(t, "c", testRecv(t, back))
	}

	none, stopNone := (&connectPhase{phaseEnv: p.phaseEnv, left: map[string]bool{}}).watchRegrow(context.Background(), newest)
	stopNone()
	assert.Nil(t, none, "no host left out: nothing to watch")
}

func testRecv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing sent within 10 s")
		return ""
	}
}
