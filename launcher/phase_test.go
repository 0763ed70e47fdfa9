package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
)

// TestMain doubles as drover's agent (as launcher/agent/remote's tests
// do): a phase test that installs this test binary as a local host's
// agent has `<it> agent preflight ...` answered here by the agent's own
// commands (agent.CLI), so that it needs no drover binary built.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		app := &cli.App{Name: "drover", Commands: []*cli.Command{agent.CLI()},
			ExitErrHandler: func(*cli.Context, error) {}}
		err := app.Run(os.Args)
		if err == nil {
			os.Exit(agent.ExitOK)
		}
		fmt.Fprintln(os.Stderr, "drover:", err)
		var ce cli.ExitCoder
		if errors.As(err, &ce) {
			os.Exit(ce.ExitCode())
		}
		os.Exit(agent.ExitFailed)
	}
	os.Exit(m.Run())
}

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
	return &connectPhase{phaseEnv: testEnv(cfg, buf), clock: clock{now: time.Now, sleep: hostio.Sleep}, dial: d, pool: pool,
		lost: func() map[string]bool { return nil }, replaced: map[string]string{}, agents: nil,
		reload: func() (*config.Config, error) { return cfg, nil }, left: map[string]bool{}, full: func() *plan.Plan { return nil },
		fenced: func(string) bool { return false }}
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
			p := &planPhase{phaseEnv: testEnv(cfg, &buf), restarts: 2, runID: "20260102-030405-a1b2c3",
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
			for _, pr := range pl.Processes {
				// The run's id, in the first plan and the replan alike.
				assert.Equal(t, "20260102-030405-a1b2c3", pr.Env["DROVER_RUN_ID"], pr.Name())
				assert.Equal(t, "1", pr.Env["DROVER_ATTEMPT"], pr.Name())
			}
		})
	}
}

// preparedJob is the job of localJob (two local hosts under a fresh
// HOME) with its hosts connected and prepared as an attempt's prepare
// phase leaves them (file access, home, leased workdirs), their agent
// said to be at agentPath already.
type preparedJob struct {
	cfg    *config.Config
	st     *attemptState
	leases *lease.Holder
	events *bytes.Buffer
}

func prepareLocalJob(t *testing.T, agentPath string) *preparedJob {
	t.Helper()
	cfg, err := config.Load(localJob(t, "exit 0\n", ""), config.LoadOptions{})
	require.NoError(t, err)
	pool := newConnPool()
	t.Cleanup(pool.closeAll)
	var pooled []*hostConn
	for _, h := range cfg.Hosts {
		tr, err := cluster.NewLocal(h.Endpoint())
		require.NoError(t, err)
		c := &hostConn{host: h, t: tr, agent: agentPath}
		pool.add(c)
		pooled = append(pooled, c)
	}
	j := &preparedJob{cfg: cfg, events: &bytes.Buffer{},
		leases: lease.New(lease.Self("job", time.Now()), lease.Options{Logf: func(string, ...any) {}})}
	t.Cleanup(j.leases.Release)
	p := &preparePhase{phaseEnv: testEnv(cfg, j.events), dial: &fakeDialer{}, pool: pool, leases: j.leases}
	j.st = &attemptState{pooled: pooled, cfg: cfg}
	require.NoError(t, p.run(context.Background(), j.st))
	require.NoError(t, <-j.st.installed)
	return j
}

// workdir is host i's workdir on this machine.
func (j *preparedJob) workdir(i int) string {
	c := j.st.conns[i]
	return remoteAbs(c.home, c.host.Workdir)
}

// TestPushPhase: the push phase scans the code directory and puts it in
// every host's workdir, and says it changed something; a second push
// over the same connections with nothing changed sends nothing and says
// so; one after a file of the code changed sends it again.
func TestPushPhase(t *testing.T) {
	j := prepareLocalJob(t, "/installed/drover")
	newPush := func() *pushPhase {
		return &pushPhase{phaseEnv: testEnv(j.cfg, j.events), now: time.Now, logRoot: t.TempDir()}
	}
	code := filepath.Join(j.cfg.Job.Code, "w.sh")
	for _, tc := range []struct {
		name        string
		edit        string // new content of w.sh before the push, "" for none
		wantChanged bool
		want        string
	}{
		{name: "first", wantChanged: true, want: "exit 0\n"},
		{name: "unchanged", wantChanged: false, want: "exit 0\n"},
		{name: "edited", edit: "exit 3\n", wantChanged: true, want: "exit 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.edit != "" {
				require.NoError(t, os.WriteFile(code, []byte(tc.edit), 0o644))
				// Another size, and a later mtime: what the stat check sees.
				later := time.Now().Add(time.Minute)
				require.NoError(t, os.Chtimes(code, later, later))
			}
			j.events.Reset()
			p := newPush()
			j.st.scan = p.scan()
			require.NoError(t, p.run(context.Background(), j.st))
			assert.Equal(t, tc.wantChanged, p.outcome.changed, "events:\n%s", j.events)
			for i, c := range j.st.conns {
				b, err := os.ReadFile(filepath.Join(j.workdir(i), "w.sh"))
				require.NoError(t, err, c.host.Name)
				assert.Equal(t, tc.want, string(b), c.host.Name)
				if tc.wantChanged {
					assert.Contains(t, j.events.String(), fmt.Sprintf("pushed 1 file(s) (%d bytes), deleted 0 on %s\n", len(tc.want), c.host.Name))
				} else {
					assert.NotContains(t, j.events.String(), "pushed")
				}
			}
		})
	}
}

// TestCkptPhase: with nothing checkpointed anywhere, staging returns no
// resume paths; with a complete checkpoint in one host's checkpoint_dir
// (a regular file under a final name), staging records it, copies it
// into the other host's own copies (through this machine: the agents'
// direct copy cannot start here) and returns DROVER_RESUME_FROM for
// both, each a path on its own host holding the checkpoint.
func TestCkptPhase(t *testing.T) {
	for _, tc := range []struct {
		name string
		save map[string]string // checkpoint_dir entries of host a
		want bool
	}{
		{name: "nothing", save: map[string]string{".step-2.pt.tmp": "half"}},
		{name: "one host", save: map[string]string{"step-1.pt": "weights"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := prepareLocalJob(t, "/installed/drover")
			for _, c := range j.st.conns {
				c.installDone()
			}
			dir := filepath.Join(j.workdir(0), j.cfg.Job.CheckpointDir)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for name, data := range tc.save {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
			}
			rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(t.TempDir(), j.cfg.Job.Name), j.cfg.Job.Name)
			require.NoError(t, err)
			p := &ckptPhase{phaseEnv: testEnv(j.cfg, j.events), now: time.Now, progress: &attemptProgress{},
				record: func(string) (*checkpoint.Record, error) { return rec, nil }}
			require.NoError(t, p.run(context.Background(), j.st), "events:\n%s", j.events)
			if !tc.want {
				assert.Nil(t, p.resume)
				assert.Empty(t, rec.Entries())
				return
			}
			require.Len(t, p.resume, 2, "events:\n%s", j.events)
			assert.Equal(t, filepath.Join(dir, "step-1.pt"), p.resume["a"], "a resumes from its own")
			assert.True(t, within(p.resume["b"], checkpoint.OwnDir(j.workdir(1))), "b resumes from drover's copy: %s", p.resume["b"])
			assert.Equal(t, "step-1.pt", path.Base(p.resume["b"]))
			for host, file := range p.resume {
				b, err := os.ReadFile(file)
				require.NoError(t, err, host)
				assert.Equal(t, "weights", string(b), host)
			}
			require.Len(t, rec.Entries(), 1)
			assert.Contains(t, j.events.String(), "resuming from checkpoint step-1.pt")
		})
	}
}

// freePort is a TCP port nothing listens on, as far as the kernel
// knows now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPreflightPhase runs the preflight phase against this test binary
// as the hosts' agent (TestMain): a plan whose program and ports are
// there passes and moves nothing; a missing program fails the attempt,
// naming the host and the program; on a restart a held rendezvous port
// moves to free ones, which the phase finds and the events tell.
func TestPreflightPhase(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		n       int
		program string
		hold    bool
		wantErr string
	}{
		{name: "ok", n: 1, program: "sh"},
		{name: "missing program", n: 1, program: "no-such-program-drover-test", wantErr: "preflight on a"},
		{name: "held port moves", n: 2, program: "sh", hold: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := prepareLocalJob(t, self)
			installed := make(chan error, 1)
			installed <- nil
			pp := &planPhase{phaseEnv: testEnv(j.cfg, j.events), fenced: func(string) (gpu.Finding, bool) { return gpu.Finding{}, false },
				findings: func(gpu.HostReport, bool) []gpu.Finding { return nil }, warn: func(gpu.Finding) {}}
			j.st.installed = installed
			require.NoError(t, pp.run(context.Background(), j.st))
			port := freePort(t)
			if tc.hold {
				l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
				require.NoError(t, err)
				defer l.Close()
			}
			for i := range j.st.plan.Processes {
				proc := &j.st.plan.Processes[i]
				proc.Command = append([]string{tc.program}, proc.Command[1:]...)
				proc.Env["MASTER_PORT"] = strconv.Itoa(port)
			}
			env := testEnv(j.cfg, j.events)
			env.n, env.total = tc.n, 2
			p := &preflightPhase{phaseEnv: env, leases: j.leases}
			err := p.run(context.Background(), j.st)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.ErrorContains(t, err, "program "+tc.program)
				return
			}
			require.NoError(t, err, "events:\n%s", j.events)
			if !tc.hold {
				assert.Empty(t, p.found.moved)
				return
			}
			rank0 := j.st.plan.Processes[0].Host.Name
			require.Contains(t, p.found.moved, rank0)
			assert.NotEqual(t, port, p.found.moved[rank0])
			assert.Len(t, p.found.moved, 1, "only rank 0's host listens on the rendezvous port")
			assert.Contains(t, j.events.String(), fmt.Sprintf("port(s) %d held on %s; this attempt uses %d", port, rank0, p.found.moved[rank0]))
		})
	}
}
