package launcher

import (
	"os"
	"path/filepath"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurm"
)

// This file is what running inside a Slurm allocation changes in the
// supervisor, kept apart from it: where hosts come from at every (re)load,
// and that nodes sharing this machine's filesystem share one copy of the
// code.

// loadOptions are the options every (re)load of the job file uses.
func (o RunOptions) loadOptions() config.LoadOptions {
	return config.LoadOptions{InventoryPath: o.InventoryPath, Allocation: o.Allocation}
}

// sharedFS is a transport that knows whether its host sees this machine's
// filesystem (the slurm transport, which checks at dial).
type sharedFS interface{ SharesFS() bool }

// pushTargets are the hosts whose workdir gets the code. Hosts reached over
// Slurm that see this machine's (shared) filesystem all have the same
// workdir: it is pushed once, from one goroutine rather than racing with
// itself, and not at all when the workdir is the code directory itself
// (code on the shared filesystem, run where it lies). A node that does not
// see it has a workdir of its own and gets its own push, as over SSH, and
// the events say so.
func (a *attempt_) pushTargets(conns []*hostConn) []*hostConn {
	var out []*hostConn
	seen := map[string]bool{}
	for _, c := range conns {
		if c.host.Transport != config.TransportSlurm {
			out = append(out, c)
			continue
		}
		wd := filepath.Clean(remoteAbs(c.home, c.host.Workdir))
		if s, ok := c.t.(sharedFS); ok && !s.SharesFS() {
			a.r.events.printf("%s: workdir %s is not shared with node %s: pushing", a.prefix(), wd, c.host.Name)
			out = append(out, c)
			continue
		}
		if seen[wd] || sameDir(wd, a.cfg.Job.Code) {
			continue
		}
		seen[wd] = true
		out = append(out, c)
	}
	return out
}

// sameDir reports whether a and b are one directory, symbolic links
// resolved.
func sameDir(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	return errA == nil && errB == nil && ra == rb
}

// restartStateDir is the job's workdir as this machine sees it, where the
// last restart count used for a Slurm job is kept (slurm.SaveRestart). On
// the shared filesystem of a usual cluster a requeued job finds it again
// whichever node runs its batch script; with a workdir private to each
// node, only when the batch script lands on the same node again, and the
// count otherwise starts from SLURM_RESTART_COUNT.
func restartStateDir(cfg *config.Config) (string, error) {
	wd := cfg.Job.Workdir
	if filepath.IsAbs(wd) {
		return wd, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, wd), nil
}

// firstRestart is the restart count of the run's first attempt: outside
// Slurm RestartOffset (0); inside, it continues from the last count used
// for the Slurm job (see slurm.FirstRestart). State that cannot be read is
// a warning: the run goes on from SLURM_RESTART_COUNT.
func (r *runner) firstRestart(cfg *config.Config) int {
	if r.opts.SlurmJobID == "" {
		return r.opts.RestartOffset
	}
	dir, err := restartStateDir(cfg)
	var last int
	var known bool
	if err == nil {
		last, known, err = slurm.LoadRestart(dir, r.opts.SlurmJobID)
	}
	if err != nil {
		r.events.printf("warning: %v; DROVER_RESTART_COUNT starts at SLURM_RESTART_COUNT=%d", err, r.opts.RestartOffset)
	}
	n := slurm.FirstRestart(last, known, r.opts.RestartOffset)
	if known {
		r.events.printf("Slurm job %s (SLURM_RESTART_COUNT=%d): its last run used DROVER_RESTART_COUNT=%d; continuing from %d", r.opts.SlurmJobID, r.opts.RestartOffset, last, n)
	}
	return n
}

// saveRestart records the restart count an attempt uses, so that a
// requeued job continues after it.
func (r *runner) saveRestart(cfg *config.Config, n int) {
	if r.opts.SlurmJobID == "" {
		return
	}
	dir, err := restartStateDir(cfg)
	if err == nil {
		err = slurm.SaveRestart(dir, r.opts.SlurmJobID, n)
	}
	if err != nil {
		r.events.printf("warning: %v; after a requeue DROVER_RESTART_COUNT may repeat", err)
	}
}
