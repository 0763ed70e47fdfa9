package lease

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"
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
	fsys := l.files()
	if fsys == nil {
		ctx, cancel := context.WithTimeout(h.ctx, 2*h.opts.StaleAfter)
		err := l.connect(ctx)
		cancel()
		if err != nil {
			return nil
		}
		fsys = l.files()
	}
	cur, err := fsys.Readlink(l.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.lost = true
		return &LostError{Host: l.name, Dir: l.dir}
	case err != nil:
		l.close()
		return nil
	}
	if o := decode(cur); o.ID != h.self.ID {
		l.lost = true
		return &LostError{Host: l.name, Dir: l.dir, By: o}
	}
	// Ours: a new link beside it, renamed over it (two requests; the
	// tmp name is new at every beat, so nothing needs removing first).
	l.beat++
	tmp := fmt.Sprintf("%s.%s.%d", l.file, h.self.ID, l.beat)
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

// giveBack removes l's lease if it is still ours.
func (h *Holder) giveBack(l *held) {
	fsys := l.files()
	if l.lost || fsys == nil {
		return
	}
	if cur, err := fsys.Readlink(l.file); err == nil && decode(cur).ID == h.self.ID {
		_ = fsys.Remove(l.file)
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
	h.mu.Unlock()
	select {
	case <-done:
	case <-time.After(releaseWait):
	}
}
