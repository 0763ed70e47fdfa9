package launcher

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/launcher/plan"
)

// countingDials dials SSH hosts for real and counts the connections per
// host, keeping them so that a test can cut one.
type countingDials struct {
	mu    sync.Mutex
	conns map[string][]cluster.Transport
}

func (d *countingDials) dial(ctx context.Context, h cluster.Endpoint) (cluster.Transport, error) {
	t, err := cluster.Dial(ctx, h, cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns[h.Name] = append(d.conns[h.Name], t)
	return t, nil
}

func (d *countingDials) count(host string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns[host])
}

func (d *countingDials) last(host string) cluster.Transport {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[host][len(d.conns[host])-1]
}

// A run keeps its connections from one attempt to the next (issue 20: each
// restart dialled every host again, and the workdir leases dialled their
// own): three attempts on two real SSH hosts dial the host whose connection
// stayed up once, for the attempts and the lease alike, and redial the
// host whose connection died (cut during the second attempt) once.
func TestRunKeepsConnections(t *testing.T) {
	fleet := fleettest.NeedUp(t, fleettest.Options{Name: "kc", N: 2, Subnet: 14, First: 120})
	bin := buildDrover(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code", "w.sh"), []byte(`
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
case $DROVER_RESTART_COUNT in
0) if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1000;;
1) sleep 1000;;
esac
echo "done rank=$RANK"
`), 0o644))
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(fmt.Sprintf(`inventory = %q
[job]
name = "keep-conns"
framework = "pytorch"
command = ["sh", "w.sh"]
code = "code"
workdir = %q
max_restarts = 1
max_host_failures = 1
host_wait = "30s"
stop_grace = "2s"
restart_backoff = "100ms"
master_port = 29671
`, fleet.Inventory, "drover-test/keep-conns-"+filepath.Base(dir))), 0o644))

	h0, h1 := fleet.Hosts[0].Name, fleet.Hosts[1].Name
	dials := &countingDials{conns: map[string][]cluster.Transport{}}
	var cut sync.Once
	out := &lineHook{onLine: func(line string) {
		// The second attempt runs on h1: its connection dies under it.
		if strings.HasPrefix(line, fmt.Sprintf("[worker-1@%s] start rank=1 restart=1", h1)) {
			cut.Do(func() { go dials.last(h1).Close() })
		}
	}}
	var events strings.Builder
	res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: out, Events: &syncWriter{w: &events},
		Dial: cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none",
			Dialers: map[string]func(context.Context, cluster.Endpoint) (cluster.Transport, error){config.TransportSSH: dials.dial}}})
	require.NoError(t, err)
	log, _ := os.ReadFile(filepath.Join(res.LogDir, "events.log"))
	t.Logf("events.log:\n%s", log)
	require.Equal(t, Succeeded, res.Outcome, res.Err)
	require.Equal(t, 3, res.Attempts)
	assert.Contains(t, events.String(), "attempt 1/2: worker-1@"+h1+" exited 3")
	assert.Regexp(t, `attempt 2/2: worker-1@`+h1+`: .* lost`, events.String())
	assert.Contains(t, out.String(), fmt.Sprintf("[worker-0@%s] done rank=0", h0))
	// Both hosts' workdirs are new: the install made them, and the first
	// push compares nothing; the next attempts' pushes do.
	for _, h := range []string{h0, h1} {
		assert.Regexp(t, `debug: attempt 1/\d+: setup: push to `+h+` took \S+ \(into a workdir the install made`, string(log))
		assert.NotRegexp(t, `debug: attempt [23]/\d+: setup: push to `+h+` took \S+ \(into`, string(log))
	}
	// sh is on the hosts' PATH, not in the pushed tree: the first
	// preflight runs beside the first push.
	assert.Regexp(t, `debug: attempt 1/\d+: setup: preflight beside the push`, string(log))
	assert.Equal(t, 1, dials.count(h0), "one connection to %s for 3 attempts and its workdir lease", h0)
	assert.Equal(t, 2, dials.count(h1), "%s: its first connection, and one more after it died", h1)
}

// syncWriter serialises writes (the events log writes from goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestSameEndpoint: only what the connection was made with decides
// whether a kept one still reaches a host as the inventory now says.
func TestSameEndpoint(t *testing.T) {
	base := config.Host{Name: "a", Address: "10.0.0.1", Transport: config.TransportSSH, User: "u", Port: 22,
		IdentityFile: "/k", KnownHosts: "/kh", ProxyJump: "bastion", Workdir: "w", GPUs: config.GPUSpec{Auto: true}}
	for _, tc := range []struct {
		name string
		edit func(h *config.Host)
		same bool
	}{
		{"unchanged", func(*config.Host) {}, true},
		{"GPUs, env and workdir", func(h *config.Host) {
			h.GPUs, h.Env, h.Workdir = config.GPUSpec{List: []int{0}}, map[string]string{"X": "1"}, "other"
		}, true},
		{"address", func(h *config.Host) { h.Address = "10.0.0.2" }, false},
		{"port", func(h *config.Host) { h.Port = 2222 }, false},
		{"user", func(h *config.Host) { h.User = "v" }, false},
		{"key", func(h *config.Host) { h.IdentityFile = "/k2" }, false},
		{"known_hosts", func(h *config.Host) { h.KnownHosts = "/kh2" }, false},
		{"jump host", func(h *config.Host) { h.ProxyJump = "" }, false},
		{"transport", func(h *config.Host) { h.Transport = config.TransportLocal }, false},
	} {
		h := base
		tc.edit(&h)
		assert.Equal(t, tc.same, sameEndpoint(base, h), tc.name)
	}
}

// A kept connection is reused for the same host; a host whose address
// changed gets none (it is dialled again) and the old one is closed.
func TestConnPoolReuse(t *testing.T) {
	pool := newConnPool()
	h := config.Host{Name: "a", Address: "local", Transport: config.TransportLocal}
	tr, err := cluster.NewLocal(h.Endpoint())
	require.NoError(t, err)
	c := &hostConn{host: h, t: tr}
	pool.add(c)
	got := pool.reuse(context.Background(), []config.Host{h})
	assert.Same(t, c, got[0])
	assert.Equal(t, tr, pool.shared(h))

	moved := h
	moved.Address = "elsewhere"
	got = pool.reuse(context.Background(), []config.Host{moved})
	assert.Nil(t, got[0], "a moved host is dialled again")
	assert.Nil(t, pool.shared(h), "the old connection is forgotten")
	assert.Nil(t, pool.shared(moved))
}

// The plan is built before the checkpoint is staged (so that the
// preflight need not wait for it, issue 20), and rebuilt with it: a
// restart still resumes every process from the newest checkpoint.
func TestRunRestartResumesFromStagedCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	job := localJob(t, `
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	# Only rank 0 fails, after its checkpoint: a rank that failed first
	# could have the group stopped before the checkpoint exists.
	if [ "$RANK" = 0 ]; then mkdir -p ckpt && echo weights >ckpt/step-7.pt; exit 3; fi
	exec sleep 60
fi
echo "resume=$DROVER_RESUME_FROM"
`, "master_port = 29685\nmax_restarts = 1\ncheckpoint_dir = \"ckpt\"\n")
	var out, events bytes.Buffer
	res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
	require.NoError(t, err, "events:\n%s", events.String())
	require.Equal(t, Succeeded, res.Outcome, "events:\n%s", events.String())
	for _, w := range []string{"worker-0", "worker-1"} {
		assert.Regexp(t, `^resume=/\S+/step-7\.pt\n$`, readLog(t, res, 2, w), w)
	}
}

// Preflight runs beside the push unless the push can change what it finds
// of the programs.
func TestProgramsFromPush(t *testing.T) {
	conns := newAttemptHosts([]*hostConn{{host: config.Host{Name: "h"}, home: "/home/u"}})
	tests := []struct {
		name    string
		program string
		workdir string
		path    string
		want    bool
	}{
		{"on the host's PATH", "python3", "wd", "", false},
		{"absolute, outside the workdir", "/usr/bin/python3", "wd", "", false},
		{"relative path", "./train.sh", "wd", "", true},
		{"relative path without ./", "bin/run", "/srv/wd", "", true},
		{"absolute into a relative workdir", "/home/u/wd/run", "wd", "", true},
		{"absolute into an absolute workdir", "/srv/wd/bin/run", "/srv/wd", "", true},
		{"absolute beside the workdir", "/srv/wd2/run", "/srv/wd", "", false},
		{"PATH outside", "run", "wd", "/usr/local/bin:/usr/bin", false},
		{"PATH into the workdir", "run", "wd", "/usr/bin:/home/u/wd/bin", true},
		{"PATH with a relative entry", "run", "wd", "bin:/usr/bin", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := plan.Process{Host: config.Host{Name: "h"}, Workdir: tt.workdir, Command: []string{tt.program, "x"}, Env: map[string]string{}}
			if tt.path != "" {
				p.Env["PATH"] = tt.path
			}
			assert.Equal(t, tt.want, programsFromPush(&plan.Plan{Processes: []plan.Process{p}}, conns))
		})
	}
}
