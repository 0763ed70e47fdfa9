package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurm"
)

// This file is what running inside a Slurm allocation changes in the
// supervisor, kept apart from it: where hosts come from at every (re)load,
// that nodes sharing this machine's filesystem share one copy of the code
// (and nodes that do not get their own), and that the restart count
// continues across a requeue.

// loadOptions are the options every (re)load of the job file uses.
func (o RunOptions) loadOptions() config.LoadOptions {
	return config.LoadOptions{InventoryPath: o.InventoryPath, Allocation: o.Allocation}
}

// sharedFS is a transport that knows whether its host sees this machine's
// filesystem (the slurm transport, which checks at dial).
type sharedFS interface{ SharesFS() bool }

// sharedWorkdir is the workdir, as this machine sees it, of a host that
// shares this machine's filesystem: a node reached over Slurm that passed
// the slurm transport's check at dial. shared is false for every other
// host, whose workdir is its own.
func sharedWorkdir(h config.Host, t cluster.Transport, home string) (wd string, shared bool) {
	if h.Transport != config.TransportSlurm {
		return "", false
	}
	if s, ok := t.(sharedFS); ok && !s.SharesFS() {
		return "", false
	}
	return filepath.Clean(remoteAbs(home, h.Workdir)), true
}

// workdirClaims is the one rule by which `drover push` and each attempt of
// `drover run` push to hosts on a shared filesystem: hosts that share one
// workdir get one push, from one goroutine rather than racing with itself,
// and none when the workdir is the code directory itself (code on the
// shared filesystem, run where it lies).
type workdirClaims struct {
	code string
	mu   sync.Mutex
	by   map[string]string // workdir -> the host that pushes it
}

func newWorkdirClaims(code string) *workdirClaims {
	return &workdirClaims{code: code, by: map[string]string{}}
}

// skip says why host h gets no push of its own, or "" when it does. Safe
// for concurrent use.
func (w *workdirClaims) skip(h config.Host, t cluster.Transport, home string) string {
	wd, shared := sharedWorkdir(h, t, home)
	if !shared {
		return ""
	}
	if sameDir(wd, w.code) {
		return fmt.Sprintf("the workdir %s is the code directory", wd)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if by, ok := w.by[wd]; ok {
		return fmt.Sprintf("the workdir %s is %s's, on the shared filesystem", wd, by)
	}
	w.by[wd] = h.Name
	return ""
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
func firstRestart(opts RunOptions, events *eventLog, cfg *config.Config) int {
	if opts.SlurmJobID == "" {
		return opts.RestartOffset
	}
	dir, err := restartStateDir(cfg)
	var last int
	var known bool
	if err == nil {
		last, known, err = slurm.LoadRestart(dir, opts.SlurmJobID)
	}
	if err != nil {
		events.printf("warning: %v; DROVER_RESTART_COUNT starts at SLURM_RESTART_COUNT=%d", err, opts.RestartOffset)
	}
	n := slurm.FirstRestart(last, known, opts.RestartOffset)
	if known {
		events.printf("Slurm job %s (SLURM_RESTART_COUNT=%d): its last run used DROVER_RESTART_COUNT=%d; continuing from %d", opts.SlurmJobID, opts.RestartOffset, last, n)
	}
	return n
}

// saveRestart records the restart count an attempt uses, so that a
// requeued job continues after it.
func saveRestart(opts RunOptions, events *eventLog, cfg *config.Config, n int) {
	if opts.SlurmJobID == "" {
		return
	}
	dir, err := restartStateDir(cfg)
	if err == nil {
		err = slurm.SaveRestart(dir, opts.SlurmJobID, n)
	}
	if err != nil {
		events.printf("warning: %v; after a requeue DROVER_RESTART_COUNT may repeat", err)
	}
}
