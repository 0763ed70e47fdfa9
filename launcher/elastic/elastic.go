package elastic

import (
	"fmt"
	"slices"
	"strings"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/plan"
)

// Input is what Decide needs: the attempt's hosts, those lost with no
// spare to take their place, and what the job allows.
type Input struct {
	// Hosts are the attempt's participants in plan order.
	Hosts []string
	// Lost are the hosts in Hosts that stayed unreachable for host_wait
	// with no spare left for them.
	Lost []string
	// MinHosts is min_hosts; 0 (unset) is every host: no shrinking.
	MinHosts int
	// Pinned are hosts that may not be left out, with why (a TensorFlow
	// chief, parameter server or evaluator: Pinned).
	Pinned map[string]string
}

// Decision is the group the next attempt runs on.
type Decision struct {
	// Keep are the hosts that go on, in plan order; Drop those left out.
	Keep, Drop []string
}

// ShrinkError is a loss the group may not shrink past: the run fails
// with it as it did before min_hosts.
type ShrinkError struct {
	// Lost are the hosts lost; Why says why the rest may not go on
	// without them, and Fix what the user can do.
	Lost     []string
	Why, Fix string
}

func (e *ShrinkError) Error() string {
	return fmt.Sprintf("cannot go on without %s: %s; %s", strings.Join(e.Lost, ", "), e.Why, e.Fix)
}

// Decide says whether the group goes on without in.Lost: only when
// min_hosts is set, no lost host is pinned, and at least min_hosts hosts
// are left. With nothing lost it keeps every host.
func Decide(in Input) (Decision, error) {
	lost := map[string]bool{}
	for _, h := range in.Lost {
		if slices.Contains(in.Hosts, h) {
			lost[h] = true
		}
	}
	var d Decision
	for _, h := range in.Hosts {
		if lost[h] {
			d.Drop = append(d.Drop, h)
		} else {
			d.Keep = append(d.Keep, h)
		}
	}
	if len(d.Drop) == 0 {
		return d, nil
	}
	fail := func(why, fix string) (Decision, error) {
		return Decision{}, &ShrinkError{Lost: d.Drop, Why: why, Fix: fix}
	}
	if in.MinHosts <= 0 {
		return fail("min_hosts is unset, so the job runs on every host or not at all",
			"bring the host back, add a host with spare = true to the inventory, or set min_hosts in the job file to train on with fewer")
	}
	var pinned []string
	for _, h := range d.Drop {
		if why, ok := in.Pinned[h]; ok {
			pinned = append(pinned, h+" ("+why+")")
		}
	}
	if len(pinned) > 0 {
		return fail("only hosts that run nothing but workers may be left out, and "+strings.Join(pinned, ", ")+" does not",
			"bring the host back or add a host with spare = true to the inventory")
	}
	if len(d.Keep) < in.MinHosts {
		return fail(fmt.Sprintf("%d host(s) left, fewer than min_hosts = %d", len(d.Keep), in.MinHosts),
			"bring the host back, add a host with spare = true to the inventory, or lower min_hosts")
	}
	return d, nil
}

// Pinned are the hosts of pl that run a task other than a worker (a
// TensorFlow chief, parameter server or evaluator), with the task:
// TF_CONFIG names them all, so the group cannot go on without them.
// PyTorch, torchrun and JAX plans pin no host.
func Pinned(pl *plan.Plan) map[string]string {
	out := map[string]string{}
	for _, p := range pl.Processes {
		switch p.Role {
		case plan.RoleChief, plan.RolePS, plan.RoleEvaluator:
			if _, ok := out[p.Host.Name]; !ok {
				out[p.Host.Name] = "runs " + p.Name()
			}
		}
	}
	return out
}

// PinnedFor is Pinned of full, the last plan that ran on every host; with
// none yet (the first attempt), every host of a TensorFlow job is pinned,
// since which runs the chief is not known before its GPUs are.
func PinnedFor(fw config.Framework, full *plan.Plan, hosts []string) map[string]string {
	if full != nil {
		return Pinned(full)
	}
	out := map[string]string{}
	if fw == config.TensorFlow {
		for _, h := range hosts {
			out[h] = "its TensorFlow task is not known before the group ran"
		}
	}
	return out
}

// Config is cfg as a group without drop runs it: those hosts out, and
// a TensorFlow job's fixed worker count lowered by the workers full (the
// plan on every host) gave them, so that the plan fits the hosts left;
// worker = "auto" counts the slots itself. The ranks, WORLD_SIZE,
// MASTER_ADDR and TF_CONFIG then follow from plan.Build as for any plan.
func Config(cfg *config.Config, full *plan.Plan, drop []string) *config.Config {
	out := *cfg
	out.Hosts = nil
	for _, h := range cfg.Hosts {
		if !slices.Contains(drop, h.Name) {
			out.Hosts = append(out.Hosts, h)
		}
	}
	if r := cfg.Job.Roles; cfg.Job.Framework == config.TensorFlow && !r.WorkerAuto && full != nil {
		for _, p := range full.Processes {
			if p.Role == plan.RoleWorker && slices.Contains(drop, p.Host.Name) {
				out.Job.Roles.Worker--
			}
		}
		out.Job.Roles.Worker = max(out.Job.Roles.Worker, 0)
	}
	return &out
}
