package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
)

// The preflight phase of an attempt (see attempt): one agent command a
// host stops what an earlier drover left behind, finds the interface
// toward the rendezvous, and checks the program and the ports.

// preflightFound is what preflight learnt of the hosts, by host name: the
// network interface toward the rendezvous address (PlanInput.Ifaces), and
// the first of the free ports that replace held ones.
type preflightFound struct {
	ifaces map[string]string
	moved  map[string]int
}

// preflightPhase checks the plan on every host (see preflight): one agent
// command a host, again while the lease moved under it (preflightOwned).
type preflightPhase struct {
	phaseEnv
	leases *lease.Holder
	found  preflightFound
}

func (p *preflightPhase) name() string { return "preflight" }

func (p *preflightPhase) cleanup() {}

// run checks st.plan and keeps what it found for the replan.
func (p *preflightPhase) run(ctx context.Context, st *attemptState) error {
	var err error
	p.found, err = p.preflightOwned(ctx, st.conns, st.plan)
	return err
}

// preflightOwned is preflight, which stops leftovers only under this
// run's lease, settled with the leases when an agent found one that is
// not: the run checks them (lease.Holder.Check), which ends it with a
// *lease.LostError when another run took one over, or takes it back when
// that run may not hold it (an older run's late renewal over a --force
// takeover), and then tries again.
func (p *preflightPhase) preflightOwned(ctx context.Context, conns []*attemptHost, pl *plan.Plan) (preflightFound, error) {
	for try := 0; ; try++ {
		found, err := p.preflight(ctx, conns, pl)
		var moved *leaseMovedError
		if !errors.As(err, &moved) || try == 3 {
			return found, err
		}
		if err := p.leases.Check(ctx); err != nil {
			return found, err
		}
	}
}

// preflight stops, per host and before anything starts, the process
// groups an earlier drover left behind on it (drover SIGKILLed with the
// agent's channel somehow kept open, or a host that was unreachable when
// its group should have stopped), finds the host's interface toward the
// plan's rendezvous address, then checks that each program can be found
// and each planned port is free: one agent command per host, one
// exchange. On a restart a port still held (by the previous attempt's
// rendezvous, say) does not fail it: the host's agent finds as many
// consecutive free ports.
func (p *preflightPhase) preflight(ctx context.Context, conns []*attemptHost, pl *plan.Plan) (preflightFound, error) {
	byHost := map[string][]plan.Process{}
	for _, proc := range pl.Processes {
		byHost[proc.Host.Name] = append(byHost[proc.Host.Name], proc)
	}
	var mu sync.Mutex
	found := preflightFound{ifaces: map[string]string{}, moved: map[string]int{}}
	err := forEach(conns, func(c *attemptHost) error {
		wd := remoteAbs(c.home, c.host.Workdir)
		o := agent.PreflightOptions{Leftovers: path.Join(wd, pidDir), Grace: p.cfg.Job.StopGrace,
			RouteTo: pl.RendezvousAddr(), Lease: path.Join(wd, lease.File), LeaseID: p.leases.ID()}
		cmd := cluster.Cmd{}
		procs := byHost[c.host.Name]
		if len(procs) > 0 {
			o.Program, o.Ports = procs[0].Command[0], plannedPorts(pl, procs)
			o.MovePorts = p.n > 1 && len(o.Ports) > 0
			cmd.Env, cmd.Dir = preflightEnv(procs[0].Env), procs[0].Workdir
		}
		// Both streams into one buffer, from two goroutines: a locked one.
		out := cluster.NewTailBuffer(preflightOutput)
		cmd.Args, cmd.Stdout, cmd.Stderr = agent.PreflightCommand(c.agent, o), out, out
		err := runToEnd(ctx, c.t, cmd)
		var rest []string
		for _, line := range strings.Split(out.String(), "\n") {
			if holds, ok := strings.CutPrefix(line, agent.LeaseTakenPrefix); ok {
				return &leaseMovedError{host: c.host.Name, dir: wd, by: lease.Decode(holds)}
			}
			if msg, ok := strings.CutPrefix(line, agent.LeftoverPrefix); ok {
				p.events.printf("%s: %s: %s", p.prefix(), c.host.Name, msg)
				continue
			}
			if v, ok := strings.CutPrefix(line, agent.IfacePrefix); ok {
				if ifc := ifaceName(v); ifc != "" {
					mu.Lock()
					found.ifaces[c.host.Name] = ifc
					mu.Unlock()
				}
				continue
			}
			v, ok := strings.CutPrefix(line, agent.FreePortsPrefix)
			if !ok || err != nil {
				rest = append(rest, line)
				continue
			}
			base, perr := strconv.Atoi(strings.TrimSpace(v))
			if perr != nil || base <= 0 {
				return fmt.Errorf("preflight on %s: bad answer %q", hostLabel(c.host), line)
			}
			mu.Lock()
			found.moved[c.host.Name] = base
			mu.Unlock()
			p.events.printf("%s: port(s) %s held on %s; this attempt uses %s", p.prefix(),
				strings.Join(o.Ports, ", "), c.host.Name, portRange(base, len(o.Ports)))
		}
		var ee *cluster.ExitError
		if err != nil && !errors.As(err, &ee) {
			return fmt.Errorf("preflight on %s: %w", hostLabel(c.host), err) // the connection, not the check
		}
		if err != nil {
			// The agent prints its failure as "drover: ..." (its CLI's
			// prefix); drover's own message names the host instead.
			msg := strings.TrimSpace(strings.ReplaceAll("\n"+strings.Join(rest, "\n"), "\ndrover: ", "\n"))
			if msg == "" {
				msg = err.Error()
			}
			return fmt.Errorf("preflight on %s: %s", hostLabel(c.host), msg)
		}
		return nil
	})
	return found, err
}

// leaseMovedError is a host's agent refusing to stop leftovers because
// the workdir's lease was not this run's when it looked (checked on the
// host just before it would have stopped anything).
type leaseMovedError struct {
	host, dir string
	by        lease.Owner
}

func (e *leaseMovedError) Error() string {
	return fmt.Sprintf("%s: the workdir lease of %s is held by %s: not stopping anything there", e.host, e.dir, e.by)
}

// preflightOutput bounds what preflight keeps of a host's answer.
const preflightOutput = 64 << 10

// preflightEnv is what of a process's environment its host's preflight
// gets: PATH alone, the one variable finding the program depends on. The
// preflight's environment travels on the login shell's command line,
// which other users of the host can read while the shell starts; the
// rest ([job.env] tokens among it) reaches only the processes, over their
// agents' stdin (agent.EnvLine).
func preflightEnv(env map[string]string) map[string]string {
	if p, ok := env["PATH"]; ok {
		return map[string]string{"PATH": p}
	}
	return nil
}

// plannedPorts are the ports procs (one host's processes) listen on: TF
// task ports, and the rendezvous port on rank 0's host.
func plannedPorts(pl *plan.Plan, procs []plan.Process) []string {
	var ports []string
	for _, p := range procs {
		if p.Port > 0 {
			ports = append(ports, fmt.Sprint(p.Port))
		}
	}
	if mp := procs[0].Env["MASTER_PORT"]; mp != "" && procs[0].Host.Name == pl.Processes[0].Host.Name {
		ports = append(ports, mp)
	}
	if jc := procs[0].Env["JAX_COORDINATOR_ADDRESS"]; jc != "" && procs[0].Host.Name == pl.Processes[0].Host.Name {
		if _, port, err := net.SplitHostPort(jc); err == nil {
			ports = append(ports, port)
		}
	}
	sort.Strings(ports)
	return compactStrings(ports)
}

func portRange(base, n int) string {
	if n == 1 {
		return strconv.Itoa(base)
	}
	return fmt.Sprintf("%d-%d", base, base+n-1)
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// stopWait bounds the wait for a command stopped because ctx ended (see
// runToEnd) to report its exit.
const stopWait = 5 * time.Second

// runToEnd runs cmd on t's host and waits for it. When ctx ends first the
// command is stopped (SIGTERM to its group) rather than left running on
// the host, as closing its channel would: a preflight stopping leftovers
// for a run that has just lost its workdir must not go on doing so.
func runToEnd(ctx context.Context, t cluster.Transport, cmd cluster.Cmd) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	own, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	p, err := t.Start(own, cmd)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		_ = p.Signal(syscall.SIGTERM)
		time.AfterFunc(stopWait, cancel) // a host that does not answer
	})
	defer stop()
	err = p.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Bounds on one answer read from a host's agent (readFromHost): a host
// is not trusted, and whatever it prints must not become drover's memory.
// Each is far above what the answer holds for a real fleet.
const (
	hostReportLimit = 8 << 20 // drover agent runs: every run and process of a workdir
	runRecordLimit  = 8 << 20 // a run record (adoption's look)
	sinceLimit      = 1 << 20 // drover agent since: an offset per log
)

// readFromHost runs args on t's host to their end and returns what they
// printed, keeping at most limit bytes: a host that prints more is stopped
// there, and the error says so (*cluster.TooMuchOutputError). said is the
// start of its stderr, escaped, for the caller's error; what names the
// command there.
func readFromHost(ctx context.Context, t cluster.Transport, args []string, what string, limit int) (out []byte, said string, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdout := cluster.NewHeadBuffer(limit, cancel)
	stderr := cluster.NewHeadBuffer(cluster.QuoteLimit, nil)
	err = runToEnd(ctx, t, cluster.Cmd{Args: args, Stdout: stdout, Stderr: stderr})
	if oe := stdout.Overflow(t.Host().Name, what); oe != nil {
		return nil, "", oe
	}
	if err != nil {
		return nil, stderr.Quote(cluster.QuoteLimit), err
	}
	return stdout.Bytes(), "", nil
}
