package sweeprun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/droverhq/drover/launcher/sweep"
)

// DefaultRefreshEvery is how often a sweep whose trials wait on other
// runs' GPU leases looks at the hosts' leases again.
const DefaultRefreshEvery = 5 * time.Second

// errNoPlace is a trial that fits no host even with every GPU free:
// sweep.CheckFits rules it out before the sweep starts, so it happens
// only once lost hosts have left too few.
var errNoPlace = errors.New("no host left has the GPUs a trial needs")

// ended is a trial's run that ended: on p, and, after a setback, what
// follows it (nil: the trial ended for good) and the host it lost, where
// the run named it.
type ended struct {
	i    int
	p    sweep.Placement
	d    *sweep.Decision
	lost string
}

// schedule starts trials as GPUs free up, until all have ended. A trial
// whose run gave its placement back (sweep.SetbackError) goes back to
// the head of the pending trials.
func (st *state) schedule(ctx context.Context) error {
	placer := st.Placer
	if placer == nil {
		placer = sweep.Pack{}
	}
	// The adopted trials' GPUs are the sweep's: in its fleet, and held
	// by those trials before the look's free GPUs are read, which shows
	// them leased (by the trials' own runs) but must not block them.
	ledger := sweep.NewLedger(sweep.Merge(st.Fleet, st.adopted()...))
	want := st.Options.Shape()
	want.GPUs = max(want.GPUs, 1)
	done := make(chan ended, len(st.trials))
	running, err := st.startAdopted(ctx, ledger, done)
	if err != nil {
		return err
	}
	if st.Free != nil {
		ledger.Available(st.Free)
	}
	var pending []int
	for i := st.skipResumed(0); i < len(st.trials); i = st.skipResumed(i + 1) {
		pending = append(pending, i)
	}
	waiting := false // said that the sweep waits on other runs' leases
	stopped := ctx.Done()
	for len(pending) > 0 || running > 0 {
		for len(pending) > 0 && ctx.Err() == nil && (st.Options.MaxParallel == 0 || running < st.Options.MaxParallel) {
			p, ok := placer.Place(ledger.Free(), want)
			if !ok {
				break
			}
			if err := ledger.Take(st.trials[pending[0]].res.ID, p); err != nil {
				return err
			}
			go st.runTrial(ctx, pending[0], p, done)
			pending, running = pending[1:], running+1
		}
		if running == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !ledger.Fits(want) || !ledger.Blocked() || st.Refresh == nil {
				return fmt.Errorf("trial %s: %w (it asks for %d GPU(s) on each of %d host(s))", st.trials[pending[0]].res.ID, errNoPlace, want.GPUs, want.Hosts)
			}
			if !waiting {
				st.table.note(fmt.Sprintf("%s waits for GPUs that other runs lease (drover probe shows them); looking again every %s",
					st.trials[pending[0]].res.ID, cmp.Or(st.RefreshEvery, DefaultRefreshEvery)))
			}
		}
		waiting = running == 0
		var look <-chan time.Time
		if len(pending) > 0 && ledger.Blocked() && st.Refresh != nil && ctx.Err() == nil {
			look = time.After(cmp.Or(st.RefreshEvery, DefaultRefreshEvery))
		}
		select {
		case e := <-done:
			running--
			pending = st.ended(ctx, ledger, e, pending)
		case <-look:
			st.refresh(ctx, ledger)
		case <-stopped:
			stopped = nil // the running trials end by the same ctx
		}
	}
	return ctx.Err()
}

// ended gives e's GPUs back and, after a setback, applies its decision:
// the host left out, the GPUs blocked until the next look, the trial
// put back at the head of pending.
func (st *state) ended(ctx context.Context, ledger *sweep.Ledger, e ended, pending []int) []int {
	ledger.Release(st.trials[e.i].res.ID)
	if e.d == nil {
		return pending
	}
	if e.d.MarkOut {
		for _, h := range st.lostHosts(ctx, e) {
			ledger.MarkOut(h)
		}
	}
	if e.d.Block {
		ledger.Block(e.p)
	}
	if e.d.Requeue {
		pending = append([]int{e.i}, pending...)
	}
	return pending
}

// lostHosts are the hosts to leave out after e lost a host: the one
// the run named, or its only host; for a trial of several hosts whose
// run did not say which, those of them that a fresh look at the hosts
// does not find (without a look: all of them).
func (st *state) lostHosts(ctx context.Context, e ended) []string {
	switch {
	case e.lost != "":
		return []string{e.lost}
	case len(e.p.Hosts) == 1:
		return []string{e.p.Host()}
	}
	var look []sweep.HostGPUs
	if st.Refresh != nil {
		look, _ = st.Refresh(ctx)
	}
	return sweep.Missing(e.p, look)
}

// refresh looks at the hosts' leases again; a look that fails leaves
// the sweep's account as it was.
func (st *state) refresh(ctx context.Context, ledger *sweep.Ledger) {
	avail, err := st.Refresh(ctx)
	if err != nil {
		st.table.note(fmt.Sprintf("looking at the hosts' GPU leases again: %v", err))
		return
	}
	ledger.Available(avail)
}

// setback decides what follows trial t's run that ended with err: nil
// when err is no setback (or the trial was stopped), else the decision
// and the host the run lost, where it named one; a lost host counts
// against the trial's max_host_failures. st.mu is held.
func (st *state) setback(ctx context.Context, t *trial, err error) (*sweep.Decision, string) {
	var sb *sweep.SetbackError
	if err == nil || t.stopped || ctx.Err() != nil || !errors.As(err, &sb) {
		return nil, ""
	}
	d := st.Policy.Requeue(sb.Setback, t.lost)
	if sb.Setback == sweep.HostLost {
		t.lost++
	}
	if d.Requeue {
		t.res = sweep.Result{ID: t.res.ID, Params: t.res.Params, State: sweep.Pending}
		t.series = nil
	}
	if sb.Setback != sweep.HostLost {
		return &d, ""
	}
	return &d, sb.Host
}
