package launcher

import (
	"context"

	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/restart"
)

// The crash-loop breaker (max_restarts_without_progress) is package
// restart's; an attempt notes here what it learns of its progress.

// attemptProgress is what the breaker learns of one attempt.
type attemptProgress struct {
	// ran says the group was started: an attempt that failed during
	// setup neither counts nor breaks a series.
	ran bool
	// resumed is the checkpoint the attempt resumed from; nil for none.
	resumed *checkpoint.Entry
	// newer says a newer checkpoint appeared before the attempt ended.
	newer bool
}

// noteResumed records which checkpoint the attempt resumes from, given
// the DROVER_RESUME_FROM paths that staging returned.
func (a *attempt) noteResumed(paths map[string]string) {
	rec, err := a.r.checkpointRecord(a.cfg.Job.Name)
	if err != nil || len(paths) == 0 {
		return
	}
	for host, p := range paths {
		if e, ok := rec.Holding(host, p); ok {
			a.progress.resumed = &e
			return
		}
	}
}

// checkProgress lists the checkpoints once more after a failed attempt
// that resumed from one, and notes whether a newer one appeared.
func (a *attempt) checkProgress(ctx context.Context, conns []*attemptHost) {
	if a.progress.resumed == nil || a.cfg.Job.MaxRestartsWithoutProgress == 0 {
		return
	}
	m, err := a.checkpoints()
	if err != nil {
		return
	}
	newest, ok, err := m.Newest(ctx, a.checkpointHosts(conns), a.checkpointSettings())
	if err != nil {
		// Unknown: count it as progress rather than stop a run on a
		// listing that failed.
		a.r.events.printf("%s: listing the checkpoints after the failure: %v", a.prefix(), err)
		a.progress.newer = true
		return
	}
	a.progress.newer = ok && newest.Seq > a.progress.resumed.Seq
}

// policy is what the crash-loop breaker (restart.Breaker) needs of p.
func (p attemptProgress) policy() restart.Progress {
	rp := restart.Progress{Ran: p.ran, Newer: p.newer}
	if p.resumed != nil {
		rp.Resumed = p.resumed.Name
	}
	return rp
}
