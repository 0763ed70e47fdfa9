package launcher

import (
	"context"
	"path"
	"slices"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/plan"
)

// The attempt's side of supervising its group (supervisor.go watches it):
// the group started and watched, what the supervisor asks of the attempt
// (the processes' environment and files, why one failed, whether the
// group succeeded), and the GPUs released after a failure.

// supervise runs the attempt's group to its end.
func (a *attempt) supervise(ctx context.Context, conns []*attemptHost, pl *plan.Plan) attemptOutcome {
	a.r.logFail.makeDir(a.logDir)
	s := newSupervisor(a, conns, pl)
	s.ctx = ctx
	defer s.cancel()
	s.start()
	if !s.stopping {
		s.announceRunning(conns)
	}
	if a.cfg.Job.HangTimeout > 0 {
		go s.watchProgressFiles(s.sessions)
	}
	if a.cfg.Job.Health != config.HealthOff {
		s.watchHealth(s.sessions, s.health)
	}
	return s.wait(ctx)
}

// processEnv is p's environment with the run's extra variables (tests).
func (a *attempt) processEnv(p plan.Process) map[string]string {
	if len(a.r.opts.Env) == 0 {
		return p.Env
	}
	env := make(map[string]string, len(p.Env)+len(a.r.opts.Env))
	for k, v := range p.Env {
		env[k] = v
	}
	for k, v := range a.r.opts.Env {
		env[k] = v
	}
	return env
}

// rootCause finds why a failed process failed (see rootCause).
func (a *attempt) rootCause(c *attemptHost, rp *running) string {
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	return rootCause(fsys, rp.p.Env["TORCHELASTIC_ERROR_FILE"], rp.stderrTail.String())
}

// succeeded applies the success policy to the processes that have exited
// (all with status 0, since any failure stops the group first).
func (a *attempt) succeeded(procs []*running) bool {
	if a.cfg.Job.Framework != config.TensorFlow {
		for _, rp := range procs {
			if !rp.done {
				return false
			}
		}
		return true
	}
	hasChief := false
	for _, rp := range procs {
		if rp.p.Role == plan.RoleChief {
			hasChief = true
		}
	}
	for _, rp := range procs {
		switch rp.p.Role {
		case plan.RoleChief:
			if !rp.done {
				return false
			}
		case plan.RoleWorker:
			mustFinish := a.cfg.Job.SuccessPolicy != config.SuccessChief || (!hasChief && rp.p.Index == 0)
			if mustFinish && !rp.done {
				return false
			}
		}
	}
	return true
}

// successNote says why the group counts as succeeded.
func (a *attempt) successNote(procs []*running) string {
	for _, rp := range procs {
		if !rp.done {
			return "success policy met (" + string(a.cfg.Job.SuccessPolicy) + ")"
		}
	}
	return ""
}

// workerCause is why a torchrun worker failed: the exception in its own
// error file, else the end of its own stderr.
func (a *attempt) workerCause(c *attemptHost, w agent.WorkerExit) string {
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	if fsys != nil && path.IsAbs(w.ErrorFile) {
		if b, err := readSmall(fsys, w.ErrorFile, 1<<20); err == nil {
			if cause, ok := parseErrorFile(b); ok {
				return cause
			}
		}
	}
	if w.Stderr != "" {
		return "stderr: " + w.Stderr
	}
	return ""
}

// processFiles are p's state record and log on its host (absolute).
func (a *attempt) processFiles(c *attemptHost, name string) (state, log string) {
	st, lg := agent.ProcessFiles(a.r.runID, a.n, name)
	wd := remoteAbs(c.home, c.host.Workdir)
	return path.Join(wd, st), path.Join(wd, lg)
}

// waitGPUsReleased waits, after a failed attempt stopped, until NVML shows
// no process of the job on the job's GPUs, so that the next attempt finds
// its memory free; a GPU still held when the wait ends is reported with
// the holding process.
func (a *attempt) waitGPUsReleased(ctx context.Context, conns []*attemptHost, pl *plan.Plan) {
	used := map[string][]int{}
	for _, p := range pl.Processes {
		for _, g := range p.Visible {
			if !slices.Contains(used[p.Host.Name], g) {
				used[p.Host.Name] = append(used[p.Host.Name], g)
			}
		}
	}
	forEach(conns, func(c *attemptHost) error {
		gpus := used[c.host.Name]
		if len(gpus) == 0 {
			return nil
		}
		probe := func(ctx context.Context) gpu.HostReport { return remote.ProbeInstalled(ctx, c.t, c.agent) }
		for _, h := range gpu.WaitReleased(ctx, probe, gpus, a.ph.plan.gpuBefore[c.host.Name], gpuReleaseWait, time.Second) {
			a.r.events.printf("%s: GPU %d on %s is still held by pid %d (%s) %s after the stop; the next attempt may not get its memory",
				a.prefix(), h.GPU, c.host.Name, h.Process.PID, orUnknown(h.Process.Name), gpuReleaseWait)
		}
		return nil
	})
}
