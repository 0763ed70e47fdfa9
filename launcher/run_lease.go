package launcher

import (
	"context"
	"errors"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/lease"
)

// startLeases gives the run its workdir leases (see package lease). The
// returned context ends, with a *lease.LostError as its cause, when
// another run takes a workdir over with --force; release gives every
// lease back and must run after the last process stopped.
func (r *runner) startLeases(ctx context.Context, job string) (_ context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r.leases = lease.New(lease.Self(job, r.now()), lease.Options{
		Force: r.opts.Force,
		Logf:  r.events.printf,
		Lost:  func(err error) { r.events.printf("%v", err); cancel(err) },
	})
	return ctx, func() {
		r.leases.Release()
		cancel(nil)
	}
}

// holdWorkdirs takes the lease of every host's workdir before the
// attempt touches it (push, leftovers, start), over the run's kept
// connections (connPool.leaseDialer); on a restart the leases are held
// already and this costs nothing. A live run holding one is a
// *lease.HeldError: nothing was changed on any host.
func (p *preparePhase) holdWorkdirs(ctx context.Context, conns []*attemptHost) error {
	targets := make([]lease.Target, len(conns))
	for i, c := range conns {
		// Absolute: the lease then needs no request for the home.
		targets[i] = lease.Target{Host: c.host, Workdir: remoteAbs(c.home, c.host.Workdir)}
	}
	opts := p.opts
	opts.Inventory = config.Endpoints(p.cfg.Hosts)
	dial := p.pool.leaseDialer(func(ctx context.Context, h config.Host) (cluster.Transport, error) {
		return p.dial.dial(ctx, h, opts)
	})
	err := p.leases.Acquire(ctx, dial, targets)
	p.leases.Keep(targets)
	return err
}

// checkLeases reads every lease of the run before a restart (see
// lease.Holder.Check): the attempt that just failed may have failed
// because another run took the workdirs over with --force and stopped
// its processes as leftovers, and restarting would stop that run's
// processes in turn. A lease taken is a *lease.LostError, said as an
// event: the run then ends without restarting.
func (r *runner) checkLeases(ctx context.Context) error {
	if lost := lostLease(ctx, nil); lost != nil {
		return lost // a renewal found it first, and said so
	}
	err := r.leases.Check(ctx)
	var le *lease.LostError
	if !errors.As(err, &le) {
		return nil
	}
	r.events.printf("%v", err)
	return err
}

// checkLeasesSoon starts checkLeases now and returns its wait: a failed
// attempt starts it as it begins to stop its group, so that the check the
// restart needs costs it no round trip of its own. A lease taken over
// after the check is still found: by the next attempt's lease, and by
// every host's agent before it stops a leftover.
func (r *runner) checkLeasesSoon(ctx context.Context) func() error {
	done := make(chan error, 1)
	go func() { done <- r.checkLeases(ctx) }()
	return func() error { return <-done }
}

// lostLease is the *lease.LostError that ended the run, when one did:
// the cause of ctx (a renewal found the lease taken) or err (an attempt
// found it taken: a newer forced run's lease at Acquire, or a host's
// agent refusing to stop leftovers for a run that no longer holds it).
func lostLease(ctx context.Context, err error) error {
	var le *lease.LostError
	if cause := context.Cause(ctx); errors.As(cause, &le) {
		return cause
	}
	if errors.As(err, &le) {
		return err
	}
	return nil
}

// IsLost reports whether err is (or wraps) a workdir another run took
// over: the run failed (exit status 1) without restarting.
func IsLost(err error) bool {
	var le *lease.LostError
	return errors.As(err, &le)
}

// IsHeld reports whether err is (or wraps) a workdir held by another live
// run, which the CLI reports like a configuration error (exit status 2).
func IsHeld(err error) bool {
	var he *lease.HeldError
	return errors.As(err, &he)
}
