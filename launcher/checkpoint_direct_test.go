package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/plan"
)

// countingFS counts the bytes of files read and written through it: what
// a copy moves through the controller.
type countingFS struct {
	cluster.FS
	n *atomic.Int64
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	k, err := r.ReadCloser.Read(p)
	r.n.Add(int64(k))
	return k, err
}

type countingWriter struct {
	io.WriteCloser
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	k, err := w.WriteCloser.Write(p)
	w.n.Add(int64(k))
	return k, err
}

// Sync keeps the fsync a copy makes before its rename.
func (w countingWriter) Sync() error {
	if s, ok := w.WriteCloser.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}

func (c countingFS) Open(p string) (io.ReadCloser, error) {
	r, err := c.FS.Open(p)
	if err != nil {
		return nil, err
	}
	return countingReader{r, c.n}, nil
}

func (c countingFS) Create(p string) (io.WriteCloser, error) {
	w, err := c.FS.Create(p)
	if err != nil {
		return nil, err
	}
	return countingWriter{w, c.n}, nil
}

// directFleet is a 4-host fleet whose hosts run the drover agent, as
// checkpointing sees them in an attempt (agentPeer over real SSH), with
// every file byte through the controller counted in relayed.
type directFleet struct {
	fleet   *fleettest.Fleet
	hosts   []checkpoint.Host
	relayed atomic.Int64
}

func newDirectFleet(t *testing.T) *directFleet {
	t.Helper()
	f := &directFleet{fleet: fleettest.NeedUp(t, fleettest.Options{Name: "cx", N: 4, Subnet: 14, First: 140})}
	bin := buildDrover(t)
	wd := fmt.Sprintf("cx/%s-%d", t.Name(), time.Now().UnixNano())
	for _, h := range f.fleet.ClusterHosts() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tr, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { tr.Close() })
		fsys, err := tr.FS(context.Background())
		require.NoError(t, err)
		home, err := fsys.Home()
		require.NoError(t, err)
		c := newAttemptHost(&hostConn{host: h, t: tr, fs: fsys, home: home, agent: uploadAgent(t, fsys, home, bin)})
		c.installDone()
		work := path.Join(home, wd)
		f.hosts = append(f.hosts, checkpoint.Host{Name: h.Name, FS: countingFS{fsys, &f.relayed}, Dir: path.Join(work, "checkpoints"),
			Own: checkpoint.OwnDir(work), Addr: plan.HostAddress(h), Peer: agentPeer{c}})
	}
	return f
}

// uploadAgent puts the drover binary on a host, as the installer would,
// under a fresh name renamed into place: an agent of an earlier test may
// still be running the one there.
func uploadAgent(t *testing.T, fsys cluster.FS, home, bin string) string {
	t.Helper()
	remote := path.Join(home, ".drover-test", "drover")
	require.NoError(t, fsys.MkdirAll(path.Dir(remote), 0o755))
	src, err := os.Open(bin)
	require.NoError(t, err)
	defer src.Close()
	tmp := fmt.Sprintf("%s.tmp-%d", remote, time.Now().UnixNano())
	w, err := fsys.Create(tmp)
	require.NoError(t, err)
	_, err = io.Copy(w, src)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, fsys.Chmod(tmp, 0o755))
	require.NoError(t, fsys.Rename(tmp, remote))
	return remote
}

// save writes a checkpoint of mb MiB on host i from inside it, as training
// does (temp name, rename), and returns its sha256.
func (f *directFleet) save(t *testing.T, i int, name string, mb int) string {
	t.Helper()
	h := f.hosts[i]
	require.NoError(t, h.FS.MkdirAll(h.Dir, 0o755))
	tmp := path.Join(h.Dir, "."+name+".tmp")
	script := fmt.Sprintf(`set -e; head -c %d /dev/urandom > %q; chown %s %q; mv %q %q; sha256sum %q`,
		mb<<20, tmp, fleettest.User, tmp, tmp, path.Join(h.Dir, name), path.Join(h.Dir, name))
	out, err := f.fleet.Exec(i, "sh", "-c", script)
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))[0]
}

func (f *directFleet) sum(t *testing.T, i int, p string) string {
	t.Helper()
	out, err := f.fleet.Exec(i, "sha256sum", p)
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))[0]
}

// block makes host from unable to reach host to on the job's network
// but for SSH: an iptables DROP rule in to's namespace (a site firewall;
// fleettest.Firewall). from's connections to to hang until they time
// out; the controller's SSH to both is untouched.
func (f *directFleet) block(t *testing.T, from, to int) {
	t.Helper()
	undo, err := f.fleet.Firewall(to, from)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Errorf("remove the firewall rule: %v", err)
		}
	})
}

type ckptEvents struct {
	mu    sync.Mutex
	lines []string
}

func (e *ckptEvents) printf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, fmt.Sprintf(format, args...))
}

func (e *ckptEvents) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

func newCheckpointManager(t *testing.T) (*checkpoint.Manager, *ckptEvents) {
	t.Helper()
	rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(t.TempDir(), "job"), "job")
	require.NoError(t, err)
	ev := &ckptEvents{}
	return checkpoint.New(rec, ev.printf, nil), ev
}

func holdersOf(m *checkpoint.Manager, name string) []string {
	var out []string
	for _, e := range m.Record().Entries() {
		if e.Name == name {
			for _, l := range e.Held {
				out = append(out, l.Kind+":"+l.Host)
			}
		}
	}
	return out
}

// waitFor polls cond; the bound only ends a hung test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, what, cond)
}

const mib = 1 << 20

// recordingPeer notes what every direct copy's sender was told.
type recordingPeer struct {
	checkpoint.Peer
	mu    *sync.Mutex
	sends *[]checkpoint.PeerSend
}

func (p recordingPeer) StartSend(ctx context.Context, o checkpoint.PeerSend, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	p.mu.Lock()
	*p.sends = append(*p.sends, o)
	p.mu.Unlock()
	return p.Peer.StartSend(ctx, o, stdin, stdout, stderr)
}

// record makes every host's Peer note its sends.
func (f *directFleet) record() (*sync.Mutex, *[]checkpoint.PeerSend) {
	mu, sends := &sync.Mutex{}, &[]checkpoint.PeerSend{}
	for i := range f.hosts {
		f.hosts[i].Peer = recordingPeer{Peer: f.hosts[i].Peer, mu: mu, sends: sends}
	}
	return mu, sends
}

// Issue 27: with checkpoint_copies = 3, a 200 MiB checkpoint rank 0
// saves reaches both other hosts straight from the agent on h0, through
// a chain h0 -> h1 -> h2, each copy verified; not one byte of it crosses
// the controller. Staging onto a host that lacks it goes host to host too.
func TestDirectCopyAndStage(t *testing.T) {
	f := newDirectFleet(t)
	mu, sends := f.record()
	m, ev := newCheckpointManager(t)
	set := checkpoint.Settings{Copies: 3, Keep: 2, PollEvery: 100 * time.Millisecond, CopyRate: 4 << 30}
	// While training runs, a copy goes through the low-priority file
	// access (CopyFS); here, the hosts' own.
	watched := slices.Clone(f.hosts[:3])
	for i := range watched {
		watched[i].CopyFS = watched[i].FS
	}
	stop := m.Watch(context.Background(), watched, set)
	defer stop()
	want := f.save(t, 0, "step-10.pt", 200)
	waitFor(t, "both copies", func() bool { return len(holdersOf(m, "step-10.pt")) == 3 })
	// The record has the copies a moment before the event says so.
	waitFor(t, "the copy's event", func() bool { return strings.Contains(ev.String(), "step-10.pt (#1, 200.0 MiB) copied") })
	stop()
	t.Log(ev)
	assert.ElementsMatch(t, []string{"written:" + f.hosts[0].Name, "copy:" + f.hosts[1].Name, "copy:" + f.hosts[2].Name}, holdersOf(m, "step-10.pt"))
	for i := 1; i < 3; i++ {
		assert.Equal(t, want, f.sum(t, i, path.Join(f.hosts[i].Own, "000001", "step-10.pt")), "%s's copy", f.hosts[i].Name)
	}
	assert.Less(t, f.relayed.Load(), int64(mib), "the checkpoint went host to host, not through the controller")
	assert.Contains(t, ev.String(), "(host to host: "+f.hosts[1].Name+", "+f.hosts[2].Name+")")
	assert.NotContains(t, ev.String(), "through the controller")
	mu.Lock()
	require.Len(t, *sends, 1, "one chain for both copies")
	assert.True(t, (*sends)[0].LowPriority, "a copy while training runs yields to it")
	assert.Equal(t, int64(4<<30), (*sends)[0].Rate, "checkpoint_copy_rate holds on the direct path")
	mu.Unlock()

	// h2 loses its copy: staging puts it back, host to host.
	require.NoError(t, f.hosts[2].FS.RemoveAll(path.Join(f.hosts[2].Own, "000001")))
	before := f.relayed.Load()
	paths, err := m.Stage(context.Background(), f.hosts[:3], set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Equal(t, want, f.sum(t, 2, paths[f.hosts[2].Name]))
	assert.Less(t, f.relayed.Load()-before, int64(mib), "staging went host to host")
	assert.Contains(t, ev.String(), "onto "+f.hosts[2].Name+" in")
	mu.Lock()
	require.Len(t, *sends, 2)
	assert.False(t, (*sends)[1].LowPriority, "staging, between attempts, runs at full speed")
	assert.Zero(t, (*sends)[1].Rate)
	mu.Unlock()

	// h0, which wrote it, is lost for good and the spare h3 joins: h3
	// gets the checkpoint from drover's copy on h1, host to host.
	group := []checkpoint.Host{f.hosts[1], f.hosts[2], f.hosts[3]}
	before = f.relayed.Load()
	paths, err = m.Stage(context.Background(), group, set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Equal(t, want, f.sum(t, 3, paths[f.hosts[3].Name]), "the spare's copy")
	assert.Less(t, f.relayed.Load()-before, int64(mib), "staging onto the spare went host to host")
	assert.Regexp(t, `staged 200.0 MiB from `+f.hosts[1].Name+`:\S+/000001/step-10.pt onto `+f.hosts[3].Name+` in \S+ \(host to host`, ev.String())
}

// When a host cannot reach another on the job's network (a firewall), the
// copy still completes, through the controller, and one event says why.
func TestDirectCopyFallsBackToRelay(t *testing.T) {
	f := newDirectFleet(t)
	f.block(t, 0, 1)
	m, ev := newCheckpointManager(t)
	set := checkpoint.Settings{Copies: 3, Keep: 2, PollEvery: 100 * time.Millisecond}
	stop := m.Watch(context.Background(), f.hosts[:3], set)
	defer stop()
	want := f.save(t, 0, "step-10.pt", 8)
	waitFor(t, "both copies", func() bool { return len(holdersOf(m, "step-10.pt")) == 3 })
	second := f.save(t, 0, "step-20.pt", 8)
	waitFor(t, "both copies of the second", func() bool { return len(holdersOf(m, "step-20.pt")) == 3 })
	stop()
	t.Log(ev)
	for i := 1; i < 3; i++ {
		assert.Equal(t, want, f.sum(t, i, path.Join(f.hosts[i].Own, "000001", "step-10.pt")), "%s's copy", f.hosts[i].Name)
		assert.Equal(t, second, f.sum(t, i, path.Join(f.hosts[i].Own, "000002", "step-20.pt")), "%s's copy", f.hosts[i].Name)
	}
	assert.GreaterOrEqual(t, f.relayed.Load(), int64(16*mib), "the copies went through the controller")
	assert.Equal(t, 1, strings.Count(ev.String(), "copying through the controller instead"), "one event, not one per checkpoint")
	assert.Regexp(t, `direct copy of checkpoint step-10.pt \(#1\) from `+f.hosts[0].Name+` to `+f.hosts[1].Name+`, `+f.hosts[2].Name+` failed \(.*connect to `+regexp.QuoteMeta(f.hosts[1].Addr)+`:\d+: .*i/o timeout.*\); copying through the controller instead`, ev.String(),
		"the event says why: the connection to h1 timed out (the firewall drops it)")
}

// writeParts saves sharded checkpoint name on host i as DCP does: one
// shard file per rank (ranks 2i and 2i+1), and on h0, the coordinator,
// .metadata last. It returns the sha256 of each file by name.
func (f *directFleet) writeParts(t *testing.T, i int, name string, kib int) map[string]string {
	t.Helper()
	h := f.hosts[i]
	require.NoError(t, h.FS.MkdirAll(h.Dir, 0o755))
	dir := path.Join(h.Dir, name)
	files := []string{fmt.Sprintf("__%d_0.distcp", 2*i), fmt.Sprintf("__%d_0.distcp", 2*i+1)}
	if i == 0 {
		files = append(files, ".metadata")
	}
	script := fmt.Sprintf("set -e; mkdir -p %q; cd %q", dir, dir)
	for _, file := range files {
		script += fmt.Sprintf("; head -c %d /dev/urandom > %s", kib<<10, file)
	}
	script += fmt.Sprintf("; chown -R %s %q; sha256sum %s", fleettest.User, dir, strings.Join(files, " "))
	out, err := f.fleet.Exec(i, "sh", "-c", script)
	require.NoError(t, err, "%s", out)
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		sums[fields[1]] = fields[0]
	}
	return sums
}

// Issue 27, sharded: 3 hosts each write their part of step-10 (two
// ranks' shards each, .metadata on h0 last); every part is copied to the
// next host, host to host. step-20's part from h2 has no copy yet when h2
// is lost for good: the new group (h0, h1 and the spare h3) resumes from
// step-10, every host with every shard (h2's from its copy on h0), and
// step-20 is never chosen.
func TestShardedCheckpointSurvivesLostHost(t *testing.T) {
	f := newDirectFleet(t)
	m, ev := newCheckpointManager(t)
	set := checkpoint.Settings{Copies: 2, Keep: 3, Marker: ".metadata", Layout: checkpoint.LayoutSharded, PollEvery: 100 * time.Millisecond}
	stop := m.Watch(context.Background(), f.hosts[:3], set)
	defer stop()
	want := map[string]string{}
	for _, i := range []int{2, 1, 0} { // the coordinator's .metadata last
		for k, v := range f.writeParts(t, i, "step-10", 512) {
			want[k] = v
		}
	}
	waitFor(t, "every part copied once", func() bool { return len(holdersOf(m, "step-10")) == 6 })
	stop()
	e := m.Record().Entries()[0]
	assert.Equal(t, []string{f.hosts[0].Name, f.hosts[1].Name, f.hosts[2].Name}, e.Parts)
	assert.Less(t, f.relayed.Load(), int64(mib), "the parts went host to host")
	// step-20 is seen whole, but no part of it is copied (as when h2 is
	// lost before its copy ran).
	noCopies := set
	noCopies.Copies = 1
	stop = m.Watch(context.Background(), f.hosts[:3], noCopies)
	for _, i := range []int{2, 1, 0} {
		f.writeParts(t, i, "step-20", 64)
	}
	waitFor(t, "step-20 seen", func() bool { return len(holdersOf(m, "step-20")) == 3 })
	stop()

	group := []checkpoint.Host{f.hosts[0], f.hosts[1], f.hosts[3]} // h2 lost, spare h3 in
	paths, err := m.Stage(context.Background(), group, set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Contains(t, ev.String(), "checkpoint step-20 (#2) is not resumed from: no host of the group holds the part "+f.hosts[2].Name+" wrote")
	for _, i := range []int{0, 1, 3} {
		h := f.hosts[i]
		require.Equal(t, path.Join(h.Own, "000001", "step-10"), paths[h.Name], "%s resumes from the union of step-10", h.Name)
		for file, sum := range want {
			assert.Equal(t, sum, f.sum(t, i, path.Join(paths[h.Name], file)), "%s has %s", h.Name, file)
		}
	}
	var b strings.Builder
	require.NoError(t, checkpoint.Render(&b, m.Record().Entries(), time.UTC))
	t.Log(b.String())
	assert.Contains(t, b.String(), "3 parts, each held: recoverable")
	assert.Contains(t, b.String(), "(copy of "+f.hosts[2].Name+"'s part)")
}

// A chain whose middle link is blocked (h1 cannot reach h2) still gets
// the checkpoint to h2: h1 says it could not forward, drover stops waiting
// for h2's receiver and copies to h2 through the controller, with one
// event; h1 keeps its direct copy.
func TestDirectCopyChainBrokenMidway(t *testing.T) {
	f := newDirectFleet(t)
	f.block(t, 1, 2)
	m, ev := newCheckpointManager(t)
	set := checkpoint.Settings{Copies: 3, Keep: 2, PollEvery: 100 * time.Millisecond}
	stop := m.Watch(context.Background(), f.hosts[:3], set)
	defer stop()
	want := f.save(t, 0, "step-10.pt", 8)
	waitFor(t, "both copies", func() bool { return len(holdersOf(m, "step-10.pt")) == 3 })
	waitFor(t, "the copy's event", func() bool { return strings.Contains(ev.String(), "step-10.pt (#1, 8.0 MiB) copied") })
	stop()
	t.Log(ev)
	for i := 1; i < 3; i++ {
		assert.Equal(t, want, f.sum(t, i, path.Join(f.hosts[i].Own, "000001", "step-10.pt")), "%s's copy", f.hosts[i].Name)
	}
	assert.Contains(t, ev.String(), f.hosts[1].Name+": "+checkpoint.ForwardFailed)
	assert.Regexp(t, `direct copy of checkpoint step-10.pt \(#1\) from `+f.hosts[0].Name+` to `+f.hosts[2].Name+` failed \(.*\); copying through the controller instead`, ev.String())
	assert.Contains(t, ev.String(), "(host to host: "+f.hosts[1].Name+")")
	assert.NotContains(t, ev.String(), "accept tcp", "h2's receiver is stopped once h1 says it cannot forward, not left to wait for a sender")
	n := f.relayed.Load()
	assert.True(t, n >= 16*mib && n < 17*mib, "only h2's copy went through the controller (read once, written once): %d bytes", n)
}
