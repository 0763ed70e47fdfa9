package checkpoint

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// fakeClock advances only when slept on or told to, and records sleeps.
type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *fakeClock) total() time.Duration {
	var t time.Duration
	for _, d := range c.slept {
		t += d
	}
	return t
}

func TestLimiter(t *testing.T) {
	const mb = 1_000_000
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		rate int64
		// reads are the bytes of each read; work is the time each read
		// itself takes (the source's own speed).
		reads []int
		work  []time.Duration
		want  time.Duration // total time asleep
	}{
		{name: "no cap", rate: 0, reads: []int{mb, mb}, want: 0},
		{name: "10 MB at 10 MB/s", rate: 10 * mb, reads: []int{mb, mb, mb, mb, mb, mb, mb, mb, mb, mb}, want: time.Second},
		{name: "uneven reads", rate: 4 * mb, reads: []int{mb / 2, 3 * mb / 2, 2 * mb}, want: time.Second},
		{name: "source slower than the cap", rate: 10 * mb, reads: []int{mb, mb}, work: []time.Duration{time.Second, time.Second}, want: 0},
		{name: "source faster than the cap: waits the difference", rate: 10 * mb, reads: []int{mb, mb},
			work: []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}, want: 100 * time.Millisecond},
		// 5 s behind (a stalled host), then a burst: only rateSlack (1 s)
		// of credit, 10 MB, is sent at once; the next 10 MB wait 1 s.
		{name: "credit after a stall is bounded", rate: 10 * mb, reads: []int{mb, 10 * mb, 10 * mb},
			work: []time.Duration{0, 5 * time.Second, 0}, want: 100*time.Millisecond + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{now: start}
			l := newLimiter(c.rate, clk)
			for i, n := range c.reads {
				if i < len(c.work) {
					clk.now = clk.now.Add(c.work[i])
				}
				require.NoError(t, l.took(ctx, n))
			}
			assert.Equal(t, c.want, clk.total(), "slept %v", clk.slept)
		})
	}
}

func TestLimiterCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newLimiter(1000, &fakeClock{now: time.Unix(0, 0)})
	assert.ErrorIs(t, l.took(ctx, 10_000), context.Canceled)
}

// recordingFS notes the paths opened and created through it.
type recordingFS struct {
	cluster.FS
	mu      sync.Mutex
	opened  []string
	created []string
}

func (r *recordingFS) Open(p string) (io.ReadCloser, error) {
	r.mu.Lock()
	r.opened = append(r.opened, p)
	r.mu.Unlock()
	return r.FS.Open(p)
}

func (r *recordingFS) Create(p string) (io.WriteCloser, error) {
	r.mu.Lock()
	r.created = append(r.created, p)
	r.mu.Unlock()
	return r.FS.Create(p)
}

// TestCopiesGoThroughCopyFS: while training runs, a copy reads the
// checkpoint and writes drover's copy through each host's CopyFS (in
// drover, the low-priority agent's SFTP server), with checkpoint_copy_rate
// applied; staging between attempts uses the plain FS.
func TestCopiesGoThroughCopyFS(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2, CopyRate: 1 << 30}
	hosts := hostsOf(hs...)
	plain := make([]*recordingFS, len(hosts))
	slow := make([]*recordingFS, len(hosts))
	for i := range hosts {
		plain[i] = &recordingFS{FS: hosts[i].FS}
		slow[i] = &recordingFS{FS: hosts[i].FS}
		hosts[i].FS, hosts[i].CopyFS = plain[i], slow[i]
	}
	data := hs[0].write(t, "step-1.pt", 3<<20, time.Now())
	watchOnce(t, m, hosts, set)
	require.NoError(t, m.replicate(context.Background(), 1, hosts, set), "%s", ev)
	fileEq(t, data, hs[1].copyPath(1, "step-1.pt"))
	assert.Equal(t, []string{filepath.Join(hs[0].Dir, "step-1.pt")}, slow[0].opened, "read through h0's CopyFS")
	assert.Contains(t, slow[1].created, filepath.Join(hs[1].Own, "000001.tmp", "step-1.pt"), "written through h1's CopyFS")
	assert.Empty(t, plain[0].opened)
	assert.Empty(t, plain[1].created)

	// Staging onto a new host: plain FS, full speed.
	hs2 := newHosts(t, "h2")
	group := []Host{hosts[0], hs2[0].Host}
	stageFS := &recordingFS{FS: group[1].FS}
	group[1].FS, group[1].CopyFS = stageFS, &recordingFS{FS: group[1].FS}
	paths, err := m.Stage(context.Background(), group, set)
	require.NoError(t, err)
	fileEq(t, data, paths["h2"])
	assert.NotEmpty(t, stageFS.created)
	assert.Empty(t, group[1].CopyFS.(*recordingFS).created)
}

// slowFS reads one byte per 5 ms: a copy through it, as through a
// low-priority server on a host whose CPUs training keeps busy, does not
// finish before a newer checkpoint supersedes it.
type slowFS struct {
	cluster.FS
	mu    sync.Mutex
	opens int
}

func (s *slowFS) Open(p string) (io.ReadCloser, error) {
	r, err := s.FS.Open(p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.opens++
	s.mu.Unlock()
	return slowReader{r}, nil
}

func (s *slowFS) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens
}

type slowReader struct{ io.ReadCloser }

func (r slowReader) Read(p []byte) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return r.ReadCloser.Read(p[:min(len(p), 1)])
}

// TestStarvedCopiesRunAtNormalPriority: when starvedAfter low-priority
// copies in a row were superseded, the next copy goes through the plain FS
// (normal priority) and finishes, so that a busy host still gets some
// checkpoints copied.
func TestStarvedCopiesRunAtNormalPriority(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, ev, _ := newManager(t)
	hosts := hostsOf(hs...)
	slow := &slowFS{FS: hosts[0].FS}
	hosts[0].CopyFS = slow
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &watcher{m: m, hosts: hosts, set: Settings{Copies: 2, Keep: 2}, wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() { defer close(done); w.copyLoop(ctx) }()

	now := time.Now()
	for i := 1; i <= starvedAfter; i++ {
		hs[0].write(t, fmt.Sprintf("step-%d.pt", i), 64<<10, now.Add(time.Duration(i)*time.Second))
		w.scan(ctx) // supersedes the copy before, if any
		eventually(t, fmt.Sprintf("copy %d under way at low priority", i), func() bool { return slow.count() == i })
	}
	last := hs[0].write(t, "step-3.pt", 64<<10, now.Add(time.Minute))
	w.scan(ctx)
	eventually(t, "step-3 copied", func() bool { return len(holders(m, starvedAfter+1)) == 2 })
	cancel()
	<-done

	fileEq(t, last, hs[1].copyPath(starvedAfter+1, "step-3.pt"))
	assert.Equal(t, starvedAfter, slow.count(), "the third copy did not go through CopyFS")
	assert.Contains(t, ev.String(), "copying checkpoint #3 at normal priority")
	assert.Equal(t, 0, w.starved, "a copy that finished resets the count")
}
