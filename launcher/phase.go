package launcher

import (
	"context"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/plan"
)

// phase is one step of an attempt (see attempt), in the spirit of Nomad's
// task-runner hooks: the attempt runs its phases in order and owns only
// what they share (attemptState); what a phase needs of the run it is
// given as fields when the attempt makes it (newPhases), never the whole
// runner, so that each phase can be tested on its own with a fake dialer
// or local transports.
type phase interface {
	// name is the step events.log notes the phase done under (see
	// attempt.stepTimer).
	name() string
	// run does the phase's work on st, reading what earlier phases left
	// there and adding its own.
	run(ctx context.Context, st *attemptState) error
	// cleanup gives back what the phase holds once the attempt is over,
	// whatever happened; the connections are the pool's, not a phase's.
	cleanup()
}

// attemptState is what an attempt's phases share: each reads what the
// phases before it left and adds its own.
type attemptState struct {
	// hosts are the participants (runner.participants), before connect.
	hosts []config.Host
	// pooled are the connections connect made or reused (the run's pool
	// keeps them for the next attempt).
	pooled []*hostConn
	// cfg is the job as the connected hosts run it: spares in place of
	// the hosts they replaced (configFor).
	cfg *config.Config
	// conns are this attempt's hosts over pooled (newAttemptHosts).
	conns []*attemptHost
	// installed says when prepare's agent installs are done.
	installed <-chan error
	// scan is the code directory, scanned in the background.
	scan *scanned
	// plan is the plan the group starts with: without the checkpoint
	// while preflight checks it, with it and what preflight found once
	// the check phase is done.
	plan *plan.Plan
	// steps notes in events.log how long the setup took up to a step
	// (attempt.stepTimer).
	steps func(step string)
}

// checkPhase pushes the code and stages the newest checkpoint while the
// agents are installed (st.installed says when) and the GPUs probed, then
// preflights the plan and leaves it in st.plan with what preflight and the
// staging found. On a restart whose code is what the last push over the
// same connections sent, the push can only repair drift (a file edited on
// a host): the preflight then runs beside it, and again after it only
// when it repaired something or the preflight failed (it may have failed
// for what the push put back). The preflight needs nothing of the
// checkpoint (ports, program and rendezvous do not depend on it): it
// checks the plan built without it.
type checkPhase struct {
	push      *pushPhase
	ckpt      *ckptPhase
	plan      *planPhase
	preflight *preflightPhase
}

// name is empty: the phases it is made of note their own steps.
func (p *checkPhase) name() string { return "" }

func (p *checkPhase) cleanup() {}

func (p *checkPhase) run(ctx context.Context, st *attemptState) error {
	pushed := make(chan error, 1)
	go func() { pushed <- runPhase(ctx, p.push, st) }()
	staged := make(chan error, 1)
	go func() { staged <- runPhase(ctx, p.ckpt, st) }()
	err := runPhase(ctx, p.plan, st)
	ferr := errNotChecked
	sc, conns := st.scan, st.conns
	<-sc.done
	fromPush := err == nil && programsFromPush(st.plan, conns)
	if early := err == nil && sc.err == nil && (allPushed(conns, sc.tree.Key()) || !fromPush); early {
		ferr = p.preflight.run(ctx, st)
		st.steps("preflight beside the push")
	}
	perr, serr := <-pushed, <-staged
	for _, e := range []error{perr, serr} {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	for _, c := range conns {
		// Hosts that share a pushed workdir (Slurm) hold the tree too.
		c.pushed = sc.tree.Key()
	}
	if ferr != nil || (p.push.outcome.changed && fromPush) {
		ferr = runPhase(ctx, p.preflight, st)
	}
	if ferr != nil {
		return ferr
	}
	p.plan.in.HostResumeFrom = p.ckpt.resume
	p.ckpt.noteResumed(p.ckpt.resume)
	st.plan, err = p.plan.replan(st.plan, p.preflight.found)
	return err
}

// dialer dials hosts: cluster.Dial and cluster.DialAll for a run
// (sshDialer), a fake in tests.
type dialer interface {
	dial(ctx context.Context, h config.Host, opts cluster.DialOptions) (cluster.Transport, error)
	dialAll(ctx context.Context, hosts []config.Host, opts cluster.DialOptions) ([]cluster.Transport, []error)
}

// sshDialer dials over the transports the inventory names.
type sshDialer struct{}

func (sshDialer) dial(ctx context.Context, h config.Host, opts cluster.DialOptions) (cluster.Transport, error) {
	return cluster.Dial(ctx, h.Endpoint(), opts)
}

func (sshDialer) dialAll(ctx context.Context, hosts []config.Host, opts cluster.DialOptions) ([]cluster.Transport, []error) {
	return cluster.DialAll(ctx, config.Endpoints(hosts), opts)
}

// clock is the run's wall clock and sleep (RunOptions.Now, Sleep).
type clock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// phaseEnv is what every phase may use of its attempt: which attempt it
// is (for event texts), the job, and the run's event log.
type phaseEnv struct {
	n, total int
	cfg      *config.Config
	events   *eventLog
}

func (e phaseEnv) prefix() string { return attemptPrefix(e.n, e.total) }

// hostsIn are the hosts of conns.
func hostsIn(conns []*hostConn) []config.Host {
	out := make([]config.Host, len(conns))
	for i, c := range conns {
		out[i] = c.host
	}
	return out
}

// agentsFunc finds the agent binaries (runner.agents).
type agentsFunc func() remote.Agents
