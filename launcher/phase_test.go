package launcher

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/lease"
)

// fakeDialer "dials" a host to a local transport, or fails with the
// error down names for it, and counts the dials per host.
type fakeDialer struct {
	mu    sync.Mutex
	down  map[string]error
	dials map[string]int
}

func (d *fakeDialer) dial(_ context.Context, h config.Host, _ cluster.DialOptions) (cluster.Transport, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dials == nil {
		d.dials = map[string]int{}
	}
	d.dials[h.Name]++
	if err := d.down[h.Name]; err != nil {
		return nil, err
	}
	return cluster.NewLocal(h.Endpoint())
}

func (d *fakeDialer) dialAll(ctx context.Context, hosts []config.Host, opts cluster.DialOptions) ([]cluster.Transport, []error) {
	ts, errs := make([]cluster.Transport, len(hosts)), make([]error, len(hosts))
	for i, h := range hosts {
		ts[i], errs[i] = d.dial(ctx, h, opts)
	}
	return ts, errs
}

// total is the number of dials made.
func (d *fakeDialer) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, k := range d.dials {
		n += k
	}
	return n
}

// testEnv is attempt 1/1 of cfg with its events in buf.
func testEnv(cfg *config.Config, buf *bytes.Buffer) phaseEnv {
	now := func() time.Time { return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC) }
	return phaseEnv{n: 1, total: 1, cfg: cfg, events: &eventLog{w: buf, now: now}}
}

// newTestConnect is a connect phase over d and pool, without a run.
func newTestConnect(cfg *config.Config, d dialer, pool *connPool, buf *bytes.Buffer) *connectPhase {
	return &connectPhase{phaseEnv: testEnv(cfg, buf), clock: clock{now: time.Now, sleep: sleepCtx}, dial: d, pool: pool,
		lost: func() map[string]bool { return nil }, replaced: map[string]string{}, agents: nil,
		reload: func() (*config.Config, error) { return cfg, nil }}
}

func localHost(name string, spare bool) config.Host {
	return config.Host{Name: name, Address: name + ".local", Transport: config.TransportLocal, Spare: spare}
}

// TestConnectPhase: connect dials every host once and leaves the
// connections and the job as they run in the state; the next attempt's
// connect reuses the pool's connections without a dial; an unreachable
// host (host_wait 0) is replaced by the first spare, with the event the
// fleet tests read; a host that refuses drover fails at once.
func TestConnectPhase(t *testing.T) {
	cfg := &config.Config{Hosts: []config.Host{localHost("a", false), localHost("b", false), localHost("s", true)}}
	hosts := cfg.Hosts[:2]
	unreachable := &cluster.UnreachableError{Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name      string
		down      map[string]error
		wantHosts []string
		wantErr   string
		wantEvent string
	}{
		{name: "all up", wantHosts: []string{"a", "b"}},
		{name: "spare", down: map[string]error{"b": unreachable}, wantHosts: []string{"a", "s"},
			wantEvent: "attempt 1/1: b (b.local) unreachable: connection refused; replaced by spare s (s.local)\n"},
		{name: "refused", down: map[string]error{"b": errors.New("ssh: handshake failed: unable to authenticate")},
			wantErr: "unable to authenticate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			d := &fakeDialer{down: tc.down}
			pool := newConnPool()
			defer pool.closeAll()
			p := newTestConnect(cfg, d, pool, &buf)
			st := &attemptState{hosts: hosts}
			err := p.run(context.Background(), st)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, h := range st.cfg.Hosts {
				got = append(got, h.Name)
				assert.False(t, h.Spare, "%s stands in for a host: not a spare", h.Name)
			}
			assert.Equal(t, tc.wantHosts, got)
			if tc.wantEvent != "" {
				assert.Contains(t, buf.String(), tc.wantEvent)
				assert.Equal(t, "s", p.replaced["b"])
			}
			dials := d.total()
			again := newTestConnect(cfg, d, pool, &buf)
			again.replaced = p.replaced
			st2 := &attemptState{hosts: hostsIn(st.pooled)}
			require.NoError(t, again.run(context.Background(), st2))
			assert.Equal(t, st.pooled, st2.pooled, "the next attempt reuses the pool's connections")
			assert.Equal(t, dials, d.total(), "and dials none")
		})
	}
}

// TestPreparePhase: over local transports whose agent an earlier
// attempt installed, prepare opens file access, learns the home
// directory and leases every workdir, and says the install is done.
func TestPreparePhase(t *testing.T) {
	var hosts []config.Host
	for _, name := range []string{"a", "b"} {
		h := localHost(name, false)
		h.Workdir = t.TempDir()
		hosts = append(hosts, h)
	}
	cfg := &config.Config{Hosts: hosts}
	pool := newConnPool()
	defer pool.closeAll()
	var pooled []*hostConn
	for _, h := range hosts {
		tr, err := cluster.NewLocal(h.Endpoint())
		require.NoError(t, err)
		c := &hostConn{host: h, t: tr, agent: "/installed/drover"}
		pool.add(c)
		pooled = append(pooled, c)
	}
	var buf bytes.Buffer
	leases := lease.New(lease.Self("job", time.Now()), lease.Options{Logf: func(string, ...any) {}})
	defer leases.Release()
	p := &preparePhase{phaseEnv: testEnv(cfg, &buf), dial: &fakeDialer{}, pool: pool, leases: leases}
	st := &attemptState{pooled: pooled, cfg: cfg}
	require.NoError(t, p.run(context.Background(), st))
	require.NoError(t, <-st.installed)
	require.Len(t, st.conns, 2)
	for _, c := range st.conns {
		assert.NotNil(t, c.fs, c.host.Name)
		assert.NotEmpty(t, c.home, c.host.Name)
		assert.FileExists(t, filepath.Join(c.host.Workdir, lease.File))
	}
	require.NoError(t, leases.Check(context.Background()))
}

// TestPlanPhase: once the agents are in, the plan phase builds the plan
// from the hosts' homes and GPUs (none here: nothing to probe) and the
// replan moves the rendezvous to the port preflight found free; with
// health = "enforce" a fenced host fails the gate with an UnhealthyError
// that names it (a spare may then stand in).
func TestPlanPhase(t *testing.T) {
	for _, tc := range []struct {
		name, health string
		fenced       string
	}{
		{name: "plan", health: "off"},
		{name: "fenced", health: "enforce", fenced: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(localJob(t, "exit 0\n", "health = \""+tc.health+"\""), config.LoadOptions{})
			require.NoError(t, err)
			var conns []*attemptHost
			for _, h := range cfg.Hosts {
				conns = append(conns, newAttemptHost(&hostConn{host: h, home: "/home/" + h.Name, agent: "/installed/drover"}))
			}
			installed := make(chan error, 1)
			installed <- nil
			var buf bytes.Buffer
			p := &planPhase{phaseEnv: testEnv(cfg, &buf), restarts: 2,
				fenced: func(host string) (gpu.Finding, bool) {
					return gpu.Finding{Host: host, What: "fenced", Critical: true}, host == tc.fenced
				},
				findings: func(gpu.HostReport, bool) []gpu.Finding { return nil }, warn: func(gpu.Finding) {}}
			st := &attemptState{conns: conns, cfg: cfg, installed: installed}
			err = p.run(context.Background(), st)
			if tc.fenced != "" {
				var ue *UnhealthyError
				require.ErrorAs(t, err, &ue)
				require.Len(t, ue.Findings, 1)
				assert.Equal(t, tc.fenced, ue.Findings[0].Host)
				return
			}
			require.NoError(t, err)
			require.Len(t, st.plan.Processes, 2)
			assert.Equal(t, "/home/a", p.in.HostHome["a"])
			assert.Equal(t, 2, p.in.RestartCount)
			pl, err := p.replan(st.plan, preflightFound{moved: map[string]int{"a": 41000}})
			require.NoError(t, err)
			assert.Equal(t, "41000", pl.Processes[0].Env["MASTER_PORT"])
		})
	}
}
