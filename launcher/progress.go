package launcher

import (
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/restart"
)

// The crash-loop breaker (max_restarts_without_progress) is package
// restart's; an attempt notes here what it learns of its progress
// (ckptPhase.noteResumed and checkProgress).

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

// policy is what the crash-loop breaker (restart.Breaker) needs of p.
func (p attemptProgress) policy() restart.Progress {
	rp := restart.Progress{Ran: p.ran, Newer: p.newer}
	if p.resumed != nil {
		rp.Resumed = p.resumed.Name
	}
	return rp
}
