package launcher

import (
	"context"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/plan"
)

// The plan phase of an attempt (see attempt): built once the agents are
// installed, from the health gate (health.go) and the GPUs
// (attempt_gpus.go), then again with the checkpoint and what preflight
// found.

// planPhase waits for the agents, runs the health gate beside the GPU
// probe and builds the plan (without the checkpoint: see checkPhase).
type planPhase struct {
	phaseEnv
	restarts int
	// fenced, findings and warn are the run's health state as the
	// attempt reads it (healthState.fencedFor, attempt.findings, warn).
	fenced   func(host string) (gpu.Finding, bool)
	findings func(rep gpu.HostReport, idle bool) []gpu.Finding
	warn     func(gpu.Finding)
	// in is the plan's input; gpuBefore, per host, the processes on each
	// GPU before the attempt (not the job's), which waitGPUsReleased
	// reads after a failure.
	in        plan.PlanInput
	gpuBefore map[string]map[int][]int
}

func (p *planPhase) name() string { return "agent, probe, plan" }

func (p *planPhase) cleanup() {}

// run leaves the plan in st.plan.
func (p *planPhase) run(ctx context.Context, st *attemptState) error {
	var err error
	p.in, st.plan, err = p.planAttempt(ctx, st.conns, st.cfg, st.installed)
	return err
}

// planAttempt waits for the agents (installed), probes the GPUs and
// builds the plan, without a checkpoint to resume from. in keeps what the
// plan was built from: the checkpoint and preflight's findings
// (interfaces, moved ports) build it again from in (replan).
func (p *planPhase) planAttempt(ctx context.Context, conns []*attemptHost, cfg *config.Config, installed <-chan error) (plan.PlanInput, *plan.Plan, error) {
	if err := <-installed; err != nil {
		return plan.PlanInput{}, nil, err
	}
	// The health gate and the GPU probe are a command each per host:
	// side by side, the gate costs no round trip of its own.
	gate := make(chan error, 1)
	go func() { gate <- p.healthGate(ctx, conns) }()
	gpus, err := p.selectGPUs(ctx, conns)
	if gerr := <-gate; gerr != nil {
		return plan.PlanInput{}, nil, gerr // a spare may stand in: before the probe's error
	}
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	homes := map[string]string{}
	for _, c := range conns {
		homes[c.host.Name] = c.home
	}
	in := plan.PlanInput{Config: cfg, GPUs: gpus, RestartCount: p.restarts, HostHome: homes}
	pl, err := plan.Build(in)
	return in, pl, err
}

// replan builds the plan again from in (which has the checkpoint now)
// with what preflight found: each host's interface, and free ports in
// place of held ones.
func (p *planPhase) replan(pl *plan.Plan, found preflightFound) (*plan.Plan, error) {
	in := p.in
	in.Ifaces = found.ifaces
	in.BasePorts = map[string]int{}
	for _, proc := range pl.Processes {
		base, ok := found.moved[proc.Host.Name]
		if !ok {
			continue
		}
		if p.cfg.Job.Framework == config.TensorFlow {
			in.BasePorts[proc.Address] = base
		} else {
			in.MasterPort = base
		}
	}
	return plan.Build(in)
}
