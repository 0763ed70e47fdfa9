package lease

// Tests of issue 30 items 4 and 5: --force takes over cleanly (the run
// that lost its lease learns so when it checks, not only at its next
// renewal; of several forced runs the newest wins every host), and a
// lease path holding something else is named and replaced under --force.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
)

// slow renews too rarely for a test to see it: whatever a test observes
// comes from Acquire, Check or the take-back under test.
var slow = Options{RenewEvery: time.Hour, StaleAfter: 400 * time.Millisecond}

// holderAt is a holder whose run started at start.
func holderAt(t *testing.T, job string, start time.Time, opts Options) (*Holder, *logs) {
	t.Helper()
	lg := &logs{}
	opts.Logf = lg.logf
	h := New(Self(job, start), opts)
	t.Cleanup(h.Release)
	return h, lg
}

func forced(o Options) Options {
	o.Force = true
	return o
}

// Check finds a takeover at once, naming the taker with its run id; the
// renewal (an hour away here) has no part in it.
func TestCheckFindsTakeoverAtOnce(t *testing.T) {
	tg, _ := target(t)
	first, _ := holder(t, "job-a", slow)
	ctx := context.Background()
	require.NoError(t, first.Acquire(ctx, dialLocal, []Target{tg}))
	require.NoError(t, first.Check(ctx), "its own lease")

	second, _ := holder(t, "job-a", forced(slow))
	require.NoError(t, second.Acquire(ctx, dialLocal, []Target{tg}))
	err := first.Check(ctx)
	var le *LostError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, second.self.ID, le.By.ID)
	assert.Contains(t, err.Error(), "run id "+second.self.ID)
	assert.Contains(t, err.Error(), "stopping this run without restarting")
	require.ErrorAs(t, first.Check(ctx), &le, "lost stays lost")
	require.NoError(t, second.Check(ctx))
}

// Of forced runs, the newest holds every host, whatever order they come
// in: an older forced run does not take a newer one's lease (it gives
// up with a *LostError naming it), and takes its own back from an older
// one that wrote over it.
func TestNewestForcedRunWins(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "wd")
	hosts := []Target{
		{Host: config.Host{Name: "h0", Address: "local", Transport: config.TransportLocal}, Workdir: wd + "0"},
		{Host: config.Host{Name: "h1", Address: "local", Transport: config.TransportLocal}, Workdir: wd + "1"},
	}
	ctx := context.Background()
	t0 := time.Now()
	older, _ := holderAt(t, "job", t0, forced(slow))
	newer, _ := holderAt(t, "job", t0.Add(time.Millisecond), forced(slow))
	// The newer one gets h0 first, the older one h1 first.
	require.NoError(t, newer.Acquire(ctx, dialLocal, hosts[:1]))
	require.NoError(t, older.Acquire(ctx, dialLocal, hosts[1:]))
	err := older.Acquire(ctx, dialLocal, hosts[:1])
	var le *LostError
	require.ErrorAs(t, err, &le, "the older forced run does not take the newer one's lease")
	assert.Equal(t, newer.self.ID, le.By.ID)
	require.NoError(t, newer.Acquire(ctx, dialLocal, hosts[1:]), "the newer one takes the older one's")

	require.NoError(t, newer.Check(ctx))
	require.ErrorAs(t, older.Check(ctx), &le)
	for _, tg := range hosts {
		got, err := os.Readlink(filepath.Join(tg.Workdir, File))
		require.NoError(t, err)
		assert.Equal(t, newer.self.ID, decode(got).ID, tg.Host.Name)
	}
}

// An older run's renewal that renamed over a forced run's takeover (it
// read its own lease just before the takeover) does not win: the forced
// run takes the lease back at its next check, and says so.
func TestForcedRunTakesBackFromOlderRenewal(t *testing.T) {
	tg, file := target(t)
	ctx := context.Background()
	t0 := time.Now()
	old, _ := holderAt(t, "job", t0, slow)
	require.NoError(t, old.Acquire(ctx, dialLocal, []Target{tg}))
	force, lg := holderAt(t, "job", t0.Add(time.Second), forced(slow))
	require.NoError(t, force.Acquire(ctx, dialLocal, []Target{tg}))

	// The old run's late renewal.
	require.NoError(t, os.Remove(file))
	require.NoError(t, os.Symlink(old.self.encode(), file))

	require.NoError(t, force.Check(ctx))
	assert.Contains(t, lg.String(), "wrote over this run's lease")
	got, err := os.Readlink(file)
	require.NoError(t, err)
	assert.Equal(t, force.self.ID, decode(got).ID)
	var le *LostError
	require.ErrorAs(t, old.Check(ctx), &le)
	assert.Equal(t, force.self.ID, le.By.ID)
}

// A lease path that is a regular file (or a directory) is named as such:
// refused without --force, replaced with it.
func TestLeasePathNotALink(t *testing.T) {
	for _, kind := range []string{"file", "dir"} {
		t.Run(kind, func(t *testing.T) {
			tg, file := target(t)
			require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
			want := "a directory"
			if kind == "file" {
				require.NoError(t, os.WriteFile(file, []byte("junk\n"), 0o644))
				want = "a regular file (5 bytes)"
			} else {
				require.NoError(t, os.Mkdir(file, 0o755))
			}
			ctx := context.Background()
			plain, _ := holder(t, "job", fast)
			err := plain.Acquire(ctx, dialLocal, []Target{tg})
			var ne *NotLeaseError
			require.ErrorAs(t, err, &ne)
			assert.Contains(t, err.Error(), "h0: the workdir lease "+file+" is "+want+", not drover's lease")
			assert.Contains(t, err.Error(), "pass --force to replace it")

			force, lg := holder(t, "job", forced(fast))
			require.NoError(t, force.Acquire(ctx, dialLocal, []Target{tg}))
			assert.Contains(t, lg.String(), "was "+want+", not drover's lease; replacing it (--force)")
			got, err := os.Readlink(file)
			require.NoError(t, err)
			assert.Equal(t, force.self.ID, decode(got).ID)
		})
	}
}

// A live run whose lease vanished, or was replaced by a regular file or
// by a link that is not drover's, says so when it reads it (every
// renewal does, as Check does here: a renewal an hour away cannot race
// the test's own changes) and puts its lease back.
func TestLeaseChangedUnderRunIsSaid(t *testing.T) {
	tg, file := target(t)
	h, lg := holder(t, "job", slow)
	require.NoError(t, h.Acquire(context.Background(), dialLocal, []Target{tg}))
	cases := []struct {
		name, said string
		spoil      func() error
	}{
		{"vanished", "vanished under this run", func() error { return os.Remove(file) }},
		// Replaced in one rename, as a renewal must not see it missing.
		{"file", "was replaced under this run by a regular file", func() error {
			if err := os.WriteFile(file+".new", []byte("x"), 0o644); err != nil {
				return err
			}
			return os.Rename(file+".new", file)
		}},
		{"foreign link", "by a link that is not drover's", func() error {
			if err := os.Symlink("somewhere", file+".new"); err != nil {
				return err
			}
			return os.Rename(file+".new", file)
		}},
	}
	for _, c := range cases {
		require.NoError(t, c.spoil(), c.name)
		require.NoError(t, h.Check(context.Background()), c.name)
		got, err := os.Readlink(file)
		require.NoError(t, err, "%s: put back", c.name)
		assert.Equal(t, h.self.ID, decode(got).ID, "%s: put back", c.name)
		assert.Contains(t, lg.String(), c.said, c.name)
	}
}

// A forced run whose lease a newer, ordinary run took (it had let the
// lease go stale: its link was down) yields: it takes back only from
// runs older than itself, so the two never fight.
func TestForcedRunYieldsToNewerRun(t *testing.T) {
	tg, file := target(t)
	ctx := context.Background()
	t0 := time.Now()
	force, _ := holderAt(t, "job", t0, forced(slow))
	require.NoError(t, force.Acquire(ctx, dialLocal, []Target{tg}))
	newer := Self("job", t0.Add(time.Minute))
	require.NoError(t, os.Remove(file))
	require.NoError(t, os.Symlink(newer.encode(), file))

	var le *LostError
	require.ErrorAs(t, force.Check(ctx), &le)
	assert.Equal(t, newer.ID, le.By.ID)
	assert.NotContains(t, le.Error(), "(--force)", "the newer run was not forced")
	got, err := os.Readlink(file)
	require.NoError(t, err)
	assert.Equal(t, newer.ID, decode(got).ID, "left alone")
}

// Keep gives back at once the lease of a workdir the run no longer uses
// (its host left the inventory) and keeps renewing the others.
func TestKeepGivesBackDroppedHosts(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "wd")
	hosts := []Target{
		{Host: config.Host{Name: "h0", Address: "local", Transport: config.TransportLocal}, Workdir: wd + "0"},
		{Host: config.Host{Name: "h1", Address: "local", Transport: config.TransportLocal}, Workdir: wd + "1"},
	}
	h, _ := holder(t, "job", fast)
	ctx := context.Background()
	require.NoError(t, h.Acquire(ctx, dialLocal, hosts))
	h.Keep(hosts[:1])
	testenv.WaitFor(t, 10*time.Second, "h1's lease given back", func() bool {
		_, err := os.Lstat(filepath.Join(hosts[1].Workdir, File))
		return os.IsNotExist(err)
	})
	before, err := os.Readlink(filepath.Join(hosts[0].Workdir, File))
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "h0's lease renewed", func() bool {
		now, err := os.Readlink(filepath.Join(hosts[0].Workdir, File))
		return err == nil && now != before
	})
	require.NoError(t, h.Check(ctx))
}
