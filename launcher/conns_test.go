package launcher

import (
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
	"github.com/droverhq/drover/cluster/testfleet"
)

// countingDials dials SSH hosts for real and counts the connections per
// host, keeping them so that a test can cut one.
type countingDials struct {
	mu    sync.Mutex
	conns map[string][]cluster.Transport
}

func (d *countingDials) dial(ctx context.Context, h config.Host) (cluster.Transport, error) {
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
	fleet := testfleet.NeedUp(t, testfleet.Options{Name: "kc", N: 2, Subnet: 14, First: 120})
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
			Dialers: map[string]func(context.Context, config.Host) (cluster.Transport, error){config.TransportSSH: dials.dial}}})
	require.NoError(t, err)
	log, _ := os.ReadFile(filepath.Join(res.LogDir, "events.log"))
	t.Logf("events.log:\n%s", log)
	require.Equal(t, Succeeded, res.Outcome, res.Err)
	require.Equal(t, 3, res.Attempts)
	assert.Contains(t, events.String(), "attempt 1/2: worker-1@"+h1+" exited 3")
	assert.Regexp(t, `attempt 2/2: worker-1@`+h1+`: .* lost`, events.String())
	assert.Contains(t, out.String(), fmt.Sprintf("[worker-0@%s] done rank=0", h0))
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
