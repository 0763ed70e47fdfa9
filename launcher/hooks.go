package launcher

import (
	"context"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// AttemptHost is one connected host of an attempt, as a hook sees it.
type AttemptHost struct {
	Host      config.Host
	Transport cluster.Transport
	FS        cluster.FS
	// Home is the login user's home directory; Workdir the job's
	// working directory there, absolute.
	Home, Workdir string
}

// AttemptHook is the seam through which another concern takes part in
// every attempt without the supervisor knowing it: checkpoint
// replication stages the newest checkpoint before an attempt and copies
// new ones while it runs. Hooks run in the order given in RunOptions.
type AttemptHook interface {
	// BeforeStart runs once every host of attempt n is connected and
	// prepared (agent installed, GPUs selected), before the plan is built
	// and the code pushed. resume is the checkpoint drover
	// found on the hosts ("" for none); the hook returns the one the
	// processes resume from (a path that exists on every host of the
	// attempt), or an error, which fails the attempt like any setup
	// error.
	BeforeStart(ctx context.Context, n int, hosts []AttemptHost, resume string) (string, error)
	// Running runs from the start of attempt n's processes until the
	// group stops, when ctx is cancelled; it must return soon after.
	Running(ctx context.Context, n int, hosts []AttemptHost)
}

// attemptHosts is conns as hooks see them.
func (a *attempt_) attemptHosts(conns []*hostConn) []AttemptHost {
	out := make([]AttemptHost, len(conns))
	for i, c := range conns {
		out[i] = AttemptHost{Host: c.host, Transport: c.t, FS: c.fs, Home: c.home, Workdir: remoteAbs(c.home, c.host.Workdir)}
	}
	return out
}

// beforeStart runs every hook's BeforeStart in turn.
func (a *attempt_) beforeStart(ctx context.Context, conns []*hostConn, resume string) (string, error) {
	if len(a.r.opts.Hooks) == 0 {
		return resume, nil
	}
	hosts := a.attemptHosts(conns)
	for _, h := range a.r.opts.Hooks {
		var err error
		if resume, err = h.BeforeStart(ctx, a.n, hosts, resume); err != nil {
			return "", err
		}
	}
	return resume, nil
}

// startRunning starts every hook's Running; the returned function stops
// them and waits for them to return.
func (a *attempt_) startRunning(conns []*hostConn) (stop func()) {
	if len(a.r.opts.Hooks) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	hosts := a.attemptHosts(conns)
	done := make(chan struct{}, len(a.r.opts.Hooks))
	for _, h := range a.r.opts.Hooks {
		go func() {
			defer func() { done <- struct{}{} }()
			h.Running(ctx, a.n, hosts)
		}()
	}
	return func() {
		cancel()
		for range a.r.opts.Hooks {
			<-done
		}
	}
}
