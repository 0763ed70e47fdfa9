package lease

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
)

// Short periods keep the tests quick; the protocol does not depend on them.
var fast = Options{RenewEvery: 40 * time.Millisecond, StaleAfter: 400 * time.Millisecond}

func dialLocal(ctx context.Context, h config.Host) (cluster.Transport, error) {
	return cluster.NewLocal(h.Endpoint())
}

// logs collects a holder's Logf lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func holder(t *testing.T, job string, opts Options) (*Holder, *logs) {
	t.Helper()
	lg := &logs{}
	opts.Logf = lg.logf
	h := New(Self(job, time.Now()), opts)
	t.Cleanup(h.Release)
	return h, lg
}

func target(t *testing.T) (Target, string) {
	t.Helper()
	wd := filepath.Join(t.TempDir(), "wd")
	return Target{Host: config.Host{Name: "h0", Address: "local", Transport: config.TransportLocal}, Workdir: wd}, filepath.Join(wd, File)
}

func TestSecondRunRefusedWhileFirstLives(t *testing.T) {
	tg, file := target(t)
	first, _ := holder(t, "job-a", fast)
	require.NoError(t, first.Acquire(context.Background(), dialLocal, []Target{tg}))
	got, err := os.Readlink(file)
	require.NoError(t, err)
	assert.Equal(t, first.self.ID, decode(got).ID)
	require.NoError(t, first.Acquire(context.Background(), dialLocal, []Target{tg}), "a lease of ours is ours again (next attempt)")

	// Another job on the same workdir, and the same job again: both refused.
	for _, job := range []string{"job-b", "job-a"} {
		second, lg := holder(t, job, fast)
		err = second.Acquire(context.Background(), dialLocal, []Target{tg})
		var he *HeldError
		require.ErrorAs(t, err, &he, job)
		assert.Equal(t, first.self.ID, he.By.ID)
		assert.Contains(t, err.Error(), fmt.Sprintf(`workdir %s on h0 is in use by the drover run of job "job-a" (controller %s, pid %d, run id %s, since `, tg.Workdir, first.self.Host, os.Getpid(), first.self.ID))
		assert.Contains(t, err.Error(), "pass --force to take over")
		assert.Contains(t, lg.String(), "watching its lease")
		got, err = os.Readlink(file)
		require.NoError(t, err)
		assert.Equal(t, first.self.ID, decode(got).ID, "the refused run left the lease alone")
	}

	// Once the first run ends, the next one gets the workdir at once.
	first.Release()
	_, err = os.Lstat(file)
	assert.ErrorIs(t, err, os.ErrNotExist, "release removes the lease")
	third, lg := holder(t, "job-b", fast)
	require.NoError(t, third.Acquire(context.Background(), dialLocal, []Target{tg}))
	assert.Empty(t, lg.String())
}

// A lease nobody renews (its controller was SIGKILLed, its machine went
// down) is taken over once it has stood still for StaleAfter.
func TestStaleLeaseTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		owner  Owner
		waited string
	}{
		{"controller elsewhere", Owner{ID: "dead1", Job: "old", Host: "far-away", PID: 1, Since: time.Now()}, fast.StaleAfter.String()},
		{"controller here, pid gone", Owner{ID: "dead2", Job: "old", Host: Self("", time.Now()).Host, PID: deadPID(t), Since: time.Now()}, (2*fast.RenewEvery + fast.RenewEvery/2).String()},
		{"not drover's", Owner{}, fast.StaleAfter.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg, file := target(t)
			require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
			text := tc.owner.encode()
			if tc.owner.ID == "" {
				text = "garbage"
			}
			require.NoError(t, os.Symlink(text, file))
			h, lg := holder(t, "new", fast)
			require.NoError(t, h.Acquire(context.Background(), dialLocal, []Target{tg}))
			got, err := os.Readlink(file)
			require.NoError(t, err)
			assert.Equal(t, h.self.ID, decode(got).ID)
			assert.Contains(t, lg.String(), "watching its lease for "+tc.waited)
			assert.Contains(t, lg.String(), "was not renewed for "+tc.waited+": that controller is gone")
		})
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	require.NoError(t, err)
	_, err = p.Wait()
	require.NoError(t, err)
	return p.Pid
}

// --force takes a live lease; the run that held it learns so at its next
// renewal, with who took it.
func TestForceTakesOverAndFirstLearns(t *testing.T) {
	tg, file := target(t)
	lost := make(chan error, 1)
	opts := fast
	opts.Lost = func(err error) { lost <- err }
	first, _ := holder(t, "job-a", opts)
	require.NoError(t, first.Acquire(context.Background(), dialLocal, []Target{tg}))

	force := fast
	force.Force = true
	second, lg := holder(t, "job-b", force)
	require.NoError(t, second.Acquire(context.Background(), dialLocal, []Target{tg}))
	assert.Contains(t, lg.String(), `h0: taking over workdir `+tg.Workdir+` from the drover run of job "job-a"`)
	select {
	case err := <-lost:
		var le *LostError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, second.self.ID, le.By.ID)
		assert.Contains(t, err.Error(), `h0: the drover run of job "job-b"`)
	case <-time.After(10 * time.Second):
		t.Fatal("the first holder never noticed")
	}
	first.Release()
	got, err := os.Readlink(file)
	require.NoError(t, err, "the first run's release leaves the second's lease alone")
	assert.Equal(t, second.self.ID, decode(got).ID)
}

// Two runs racing for a free workdir: exactly one wins.
func TestRaceOneWins(t *testing.T) {
	tg, _ := target(t)
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		h, _ := holder(t, fmt.Sprint("job-", i), fast)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.Acquire(context.Background(), dialLocal, []Target{tg})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		var he *HeldError
		assert.ErrorAs(t, err, &he)
	}
	assert.Equal(t, 1, won)
}

// A run refused on several hosts by the same run says so once.
func TestRefusalFoldedAcrossHosts(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "wd")
	hosts := []Target{
		{Host: config.Host{Name: "h0", Address: "local", Transport: config.TransportLocal}, Workdir: wd},
		{Host: config.Host{Name: "h1", Address: "local", Transport: config.TransportLocal}, Workdir: wd},
	}
	first, _ := holder(t, "job-a", fast)
	require.NoError(t, first.Acquire(context.Background(), dialLocal, hosts), "one run may hold a workdir through two hosts")
	second, _ := holder(t, "job-b", fast)
	err := second.Acquire(context.Background(), dialLocal, hosts)
	var he *HeldError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, []string{"h0", "h1"}, he.Hosts)
	assert.Equal(t, 1, strings.Count(err.Error(), "is in use by"), err.Error())
}

// A host that moved between attempts (the inventory changed its address)
// is renewed at its new address.
func TestMovedHostRenewedAtNewAddress(t *testing.T) {
	tg, file := target(t)
	var mu sync.Mutex
	dialled := map[string]int{}
	dial := func(ctx context.Context, h config.Host) (cluster.Transport, error) {
		mu.Lock()
		dialled[h.Address]++
		mu.Unlock()
		return dialLocal(ctx, h)
	}
	h, _ := holder(t, "job-a", fast)
	require.NoError(t, h.Acquire(context.Background(), dial, []Target{tg}))
	moved := tg
	moved.Host.Address = "local2"
	require.NoError(t, h.Acquire(context.Background(), dial, []Target{moved}))
	before, err := os.Readlink(file)
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "a renewal over a connection to the new address", func() bool {
		mu.Lock()
		defer mu.Unlock()
		now, _ := os.Readlink(file)
		return dialled["local2"] > 0 && now != before
	})
}

// Two hosts sharing a workdir hold one lease file through two helds of
// one run, renewed at the same cadence: their temporary links of a beat
// must differ, or one's creation fails on the other's and the lease stands
// still while the run lives (see held.tmpLink).
func TestSharedWorkdirTmpLinksDiffer(t *testing.T) {
	a := &held{file: "/wd/.drover/lease", beat: 7, nonce: newNonce()}
	b := &held{file: "/wd/.drover/lease", beat: 7, nonce: newNonce()}
	for a.nonce == b.nonce {
		b.nonce = newNonce()
	}
	assert.NotEqual(t, a.tmpLink("run1"), b.tmpLink("run1"))
	assert.True(t, strings.HasPrefix(a.tmpLink("run1"), a.file+".run1."), a.tmpLink("run1"))
}
