package checkpoint

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// stopWait bounds how long stopping a Watcher waits for a copy to notice:
// a read from a host whose link just died can block until the caller
// closes that connection, which it does right after.
const stopWait = 5 * time.Second

// Watch polls the hosts' checkpoint directories until the returned stop is
// called, records every entry that becomes complete and copies the newest
// in the background (see the package doc). stop cancels a copy in flight
// and waits a bounded time for it; the caller closes the connections only
// after stop returns.
func (m *Manager) Watch(ctx context.Context, hosts []Host, set Settings) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{m: m, hosts: hosts, set: set, wake: make(chan struct{}, 1)}
	if w.set.PollEvery <= 0 {
		w.set.PollEvery = DefaultPollEvery
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.poll(ctx) }()
	go func() { defer wg.Done(); w.copyLoop(ctx) }()
	return func() {
		w.settle(settleWait)
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopWait):
		}
	}
}

// settleWait bounds how long stopping a Watcher lets a copy already
// under way finish first: one that lands on its receiver as the group
// ends must still be recorded, with its content's digest, or the
// crash-loop breaker takes a checkpoint that was only touched for
// progress (restart.Advanced counts what drover has not read). A large
// copy is cut at the bound as before.
const settleWait = 3 * time.Second

// settle waits up to d for the copy under way, if any, to end.
func (w *watcher) settle(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		busy := w.cur != 0
		w.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type watcher struct {
	m     *Manager
	hosts []Host
	set   Settings
	wake  chan struct{}

	mu     sync.Mutex
	want   int // newest seq seen complete
	copied int // newest seq whose copy finished or was given up
	cur    int // seq being copied, 0 for none
	cancel context.CancelFunc
	// starved counts the copies superseded in a row (copyLoop's only).
	starved int
}

// starvedAfter is how many copies in a row a newer checkpoint may
// supersede before the next one runs at normal priority (FS, not
// CopyFS): on hosts whose CPUs training keeps busy, a copy at the lowest
// priority gets no time and would never finish, leaving every checkpoint
// on its writer alone. So at least one checkpoint in starvedAfter+1 is
// copied whatever the load.
const starvedAfter = 2

func (w *watcher) replicating() bool { return w.set.Copies > 1 || w.set.Mirror != "" }

func (w *watcher) poll(ctx context.Context) {
	t := time.NewTicker(w.set.PollEvery)
	defer t.Stop()
	for {
		w.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan records what completed since the last scan and asks for the newest
// to be copied, superseding a copy of an older one.
func (w *watcher) scan(ctx context.Context) {
	found, ok, _ := scanAll(ctx, w.hosts, w.set)
	var all []Found
	for _, f := range found {
		all = append(all, f...)
	}
	// Entries that completed within one poll: their own host's order.
	slices.SortStableFunc(all, ByModTime)
	added, err := w.m.rec.Saw(all, w.m.now())
	if err == nil && w.set.Sharded() {
		err = w.m.rec.NoteParts()
	}
	if err == nil && w.set.Sharded() {
		err = w.m.rec.ExpectParts(added, unscanned(w.hosts, ok))
	}
	if err != nil {
		w.m.events("%v", err)
		return
	}
	if len(added) == 0 || !w.replicating() {
		return
	}
	newest := added[len(added)-1]
	w.mu.Lock()
	w.want = max(w.want, newest.Seq)
	if w.cur != 0 && w.cur < w.want {
		w.cancel()
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// copyLoop copies one checkpoint at a time, always the newest wanted.
func (w *watcher) copyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		for {
			w.mu.Lock()
			seq := w.want
			if seq <= w.copied || ctx.Err() != nil {
				w.mu.Unlock()
				break
			}
			cctx, cancel := context.WithCancel(ctx)
			w.cur, w.cancel = seq, cancel
			w.mu.Unlock()

			err := w.m.replicate(cctx, seq, w.copyHosts(seq), w.set)
			cancel()
			w.mu.Lock()
			w.cur, w.cancel = 0, nil
			superseded := w.want > seq
			w.copied = max(w.copied, seq)
			w.mu.Unlock()
			switch {
			case err == nil:
				w.starved = 0
			case ctx.Err() != nil:
				return
			case superseded && errors.Is(err, context.Canceled):
				w.starved++
				w.m.events("copy of checkpoint #%d superseded by a newer checkpoint", seq)
			default:
				w.m.events("copy of checkpoint #%d: %v", seq, err)
			}
		}
	}
}

// copyHosts are the hosts as the copy of seq sees them: with their
// low-priority CopyFS, unless starvedAfter copies in a row were
// superseded, when this one goes through FS at normal priority.
func (w *watcher) copyHosts(seq int) []Host {
	if w.starved < starvedAfter {
		return w.hosts
	}
	w.m.events("the last %d copies were superseded before they finished (the hosts' CPUs are busy and copies run at the lowest priority); copying checkpoint #%d at normal priority", w.starved, seq)
	hosts := slices.Clone(w.hosts)
	for i := range hosts {
		hosts[i].CopyFS = nil
	}
	return hosts
}
