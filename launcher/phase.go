package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
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

// dialAll dials every host at once. Hosts whose keys are unknown are said
// together (cluster.UnknownHosts): each one's error becomes the one that
// names them all with one ssh-keyscan line, so that whichever the run
// reports first, a new fleet is known after one fix, not one per host.
func (sshDialer) dialAll(ctx context.Context, hosts []config.Host, opts cluster.DialOptions) ([]cluster.Transport, []error) {
	ts, errs := cluster.DialAll(ctx, config.Endpoints(hosts), opts)
	if all := cluster.UnknownHosts(errs); all != nil {
		for i, err := range errs {
			if cluster.IsUnknownHostKey(err) {
				errs[i] = all
			}
		}
	}
	return ts, errs
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

// attemptHost is a host of one attempt: the pooled connection and what
// this attempt's setup learns of the host on it. Each attempt makes its
// own (newAttemptHosts), so nothing of an attempt is re-armed on a
// connection the next attempt reuses.
type attemptHost struct {
	*hostConn
	// What this attempt's agent install learnt of the host, before its
	// upload: told is closed once it has said (or failed, or had nothing
	// to do). toldHome is the home directory, so that opening the files
	// needs no request of its own for it; newWorkdir says the install
	// created the workdir (it was not there), so the first push has
	// nothing on the host to compare.
	told       chan struct{}
	toldOnce   sync.Once
	toldHome   string
	newWorkdir atomic.Bool
	// installed is closed once installAgents has set agent (or failed):
	// direct checkpoint copies, which start beside the install, wait for
	// it.
	installed     chan struct{}
	installedOnce sync.Once
}

// scanned is the local side of an attempt's push: the code directory's
// tree and the options it was scanned with, once scan's goroutine is done.
type scanned struct {
	done chan struct{}
	tree *push.Tree
	opts push.Options
	err  error
}

// attemptPrefix begins every event of attempt n of total.
func attemptPrefix(n, total int) string { return fmt.Sprintf("attempt %d/%d", n, total) }

// runPhase runs p on st and notes in events.log when it was done (a
// phase composed of others notes its parts itself).
func runPhase(ctx context.Context, p phase, st *attemptState) error {
	err := p.run(ctx, st)
	if n := p.name(); n != "" {
		st.steps(n)
	}
	return err
}

// errNotChecked: no preflight ran yet.
var errNotChecked = errors.New("not checked")
