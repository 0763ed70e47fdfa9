package lease

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/droverhq/drover/cluster"
)

// releaseWait bounds how long Release waits for a host to give its lease
// back before it closes the connection: a host that stopped answering
// must not keep drover from exiting (its lease then goes stale instead).
const releaseWait = 3 * time.Second

// renewLoop renews l every RenewEvery until Release, or until another run
// took it over. A host that stops answering is dialled again at the next
// tick; its lease goes stale meanwhile, which is right: a controller that
// cannot reach a host does not control it. At Release it removes the
// lease if it is still ours.
func (h *Holder) renewLoop(l *held) {
	defer h.wg.Done()
	defer l.close()
	tick := time.NewTicker(h.opts.RenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-h.ctx.Done():
			h.giveBack(l)
			return
		case <-l.dropped:
			h.giveBack(l)
			return
		case <-tick.C:
		}
		if err := h.renew(l); err != nil {
			h.lostOnce.Do(func() { h.opts.Lost(err) })
			return
		}
	}
}

// renew moves l's beat, or returns a *LostError when l is no longer ours.
// Connection trouble is not an error here: the next tick tries again.
func (h *Holder) renew(l *held) error {
	l.op.Lock()
	defer l.op.Unlock()
	fsys := h.reconnect(h.ctx, l)
	if fsys == nil {
		return nil
	}
	ours, err := h.verify(fsys, l)
	if !ours || err != nil {
		return err
	}
	// Ours: a new link beside it, renamed over it (two requests; the
	// tmp name is new at every beat, so nothing needs removing first).
	l.beat++
	tmp := l.tmpLink(h.self.ID)
	err = fsys.Symlink(h.mine(l), tmp)
	if err == nil {
		err = fsys.Rename(tmp, l.file)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		l.close()
	}
	return nil
}

// reconnect is l's file access, dialled afresh (bounded) when it has
// none; nil when the host does not answer.
func (h *Holder) reconnect(ctx context.Context, l *held) cluster.FS {
	if fsys := l.files(); fsys != nil {
		return fsys
	}
	ctx, cancel := context.WithTimeout(ctx, 2*h.opts.StaleAfter)
	defer cancel()
	if l.connect(ctx) != nil {
		return nil
	}
	return l.files()
}

// verify reads l's lease and reports whether it is ours, after putting it
// back when it vanished or holds something that is not a drover lease
// (each said as an event: the run goes on, but someone touched its
// workdir), and, for a forced run, taking it back from a run that started
// before it (an older run's renewal that renamed over our takeover). A lease that
// another run holds and may hold is a *LostError. ours is false, with no
// error, when the host did not answer: the next renewal tries again.
func (h *Holder) verify(fsys cluster.FS, l *held) (ours bool, err error) {
	cur, err := fsys.Readlink(l.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		h.opts.Logf("%s: the workdir lease %s vanished under this run (removed by hand?); taking it again", l.name, l.file)
		return h.restore(fsys, l, "")
	case err != nil:
		what := describe(fsys, l.file)
		if what == "" {
			l.close() // the connection, most likely
			return false, nil
		}
		h.opts.Logf("%s: the workdir lease %s was replaced under this run by %s; putting it back", l.name, l.file, what)
		if err := fsys.Remove(l.file); err != nil {
			return false, fmt.Errorf("%s: the workdir lease %s was replaced by %s, which cannot be removed: %w", l.name, l.file, what, err)
		}
		return h.restore(fsys, l, "")
	}
	o := decode(cur)
	switch {
	case o.ID == h.self.ID:
		return true, nil
	case o.ID == "":
		h.opts.Logf("%s: the workdir lease %s was replaced under this run by a link that is not drover's (%.60q); putting it back", l.name, l.file, cur)
		return h.restore(fsys, l, cur)
	case h.self.Forced && o.startedBefore(h.self):
		// An older run's late renewal renamed over our takeover. A
		// newer run yields nothing: a forced one outranks us, and an
		// ordinary one took a lease we had let go stale.
		h.opts.Logf("%s: %s wrote over this run's lease on workdir %s; taking it back (--force)", l.name, o, l.dir)
		return h.restore(fsys, l, cur)
	}
	l.lost = &LostError{Host: l.name, Dir: l.dir, By: o}
	return false, l.lost
}

// restore makes l's lease ours again when it still reads old ("" for
// none); ours is false when it changed meanwhile (the next check sees to
// whom) or the host did not answer.
func (h *Holder) restore(fsys cluster.FS, l *held, old string) (ours bool, err error) {
	if old == "" {
		err := fsys.Symlink(h.mine(l), l.file)
		if errors.Is(err, fs.ErrNotExist) {
			// .drover itself went (removed by hand): make it again.
			if err = fsys.MkdirAll(path.Dir(l.file), 0o700); err == nil {
				err = fsys.Symlink(h.mine(l), l.file)
			}
		}
		return err == nil, nil
	}
	ok, err := h.replace(fsys, l, old)
	if err != nil {
		l.close()
		return false, nil
	}
	return ok, nil
}

// Check reads every lease this run holds, now, and returns a *LostError
// when another run took one over: a run checks before it restarts its
// group and before it stops anything as a leftover, rather than leave it
// to the next renewal, which may come after it has done either. A lease
// that vanished or was replaced by something that is not a lease is put
// back (and said); a host that does not answer is not an error here (the
// attempt that follows finds it unreachable).
func (h *Holder) Check(ctx context.Context) error {
	h.mu.Lock()
	ls := make([]*held, 0, len(h.held))
	for _, l := range h.held {
		ls = append(ls, l)
	}
	h.mu.Unlock()
	errs := make([]error, len(ls))
	done := make(chan struct{})
	for i, l := range ls {
		go func() {
			defer func() { done <- struct{}{} }()
			l.op.Lock()
			defer l.op.Unlock()
			if l.lost != nil {
				errs[i] = l.lost
				return
			}
			if fsys := h.reconnect(ctx, l); fsys != nil {
				_, errs[i] = h.verify(fsys, l)
			}
		}()
	}
	for range ls {
		<-done
	}
	return errors.Join(errs...)
}

// giveBack removes l's lease if it is still ours, over a new connection
// when its own was closed (a failed setup closes the run's connections,
// which the lease shares, before the run ends).
func (h *Holder) giveBack(l *held) {
	l.op.Lock()
	defer l.op.Unlock()
	if l.lost != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	for try := 0; try < 2; try++ {
		fsys := h.reconnect(ctx, l)
		if fsys == nil {
			return
		}
		cur, err := fsys.Readlink(l.file)
		if err == nil && decode(cur).ID == h.self.ID {
			_ = fsys.Remove(l.file)
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) || describe(fsys, l.file) != "" {
			return
		}
		l.close() // a dead connection: once more over a new one
	}
}

// Release stops renewing, removes every lease that is still ours and
// closes the holder's connections. The run calls it once its processes
// are stopped; a run that never gets here (SIGKILL) leaves leases that go
// stale. A host that does not answer within releaseWait keeps a lease
// that goes stale. Release is idempotent.
func (h *Holder) Release() {
	h.mu.Lock()
	h.cancel()
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(releaseWait):
	}
	// Cut short whatever is stuck on a dead link.
	h.mu.Lock()
	for _, l := range h.held {
		l.close()
	}
	for _, l := range h.gone {
		l.close()
	}
	h.mu.Unlock()
	select {
	case <-done:
	case <-time.After(releaseWait):
	}
}
