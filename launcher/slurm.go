package launcher

import (
	"path/filepath"

	"github.com/droverhq/drover/cluster/config"
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
