package lease

import (
	"context"
	"errors"
	"io/fs"
	"time"
)

// renewLoop renews l every RenewEvery until Release, or until another run
// took it over. A host that stops answering is dialled again at the next
// tick; its lease goes stale meanwhile, which is right: a controller that
// cannot reach a host does not control it.
func (h *Holder) renewLoop(l *held) {
	defer h.wg.Done()
	tick := time.NewTicker(h.opts.RenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
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
	if l.fs == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*h.opts.StaleAfter)
		err := l.connect(ctx)
		cancel()
		if err != nil {
			return nil
		}
	}
	cur, err := l.fs.Readlink(l.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		h.markLost(l)
		return &LostError{Host: l.target.Host.Name, Dir: l.dir}
	case err != nil:
		l.close()
		return nil
	}
	if o := decode(cur); o.ID != h.self.ID {
		h.markLost(l)
		return &LostError{Host: l.target.Host.Name, Dir: l.dir, By: o}
	}
	l.beat++
	if _, err := h.replace(l, cur); err != nil {
		l.close()
	}
	return nil
}

func (h *Holder) markLost(l *held) {
	h.mu.Lock()
	l.lost = true
	h.mu.Unlock()
}

// Release stops renewing, removes every lease that is still ours and
// closes the holder's connections. The run calls it once its processes
// are stopped; a run that never gets here (SIGKILL) leaves leases that go
// stale. Release is idempotent.
func (h *Holder) Release() {
	h.mu.Lock()
	select {
	case <-h.stop:
		h.mu.Unlock()
		return
	default:
	}
	close(h.stop)
	h.mu.Unlock()
	h.wg.Wait()
	for _, l := range h.held {
		if !l.lost && l.fs != nil {
			if cur, err := l.fs.Readlink(l.file); err == nil && decode(cur).ID == h.self.ID {
				_ = l.fs.Remove(l.file)
			}
		}
		l.close()
	}
}
