package restart

import "fmt"

// The crash-loop breaker (max_restarts_without_progress): a script with a
// bug that no restart fixes fails the same way after every resume, and
// restarting it max_restarts times burns that many attempts of the whole
// fleet. A restart made progress when a checkpoint newer than the one it
// resumed from appeared before it failed; the run stops after that many
// restarts in a row made none. An attempt that started from scratch is
// not judged: a job that never checkpoints (or has not yet) cannot show
// progress this way, and the breaker leaves it alone.

// Progress is what the breaker learns of one attempt.
type Progress struct {
	// Ran says the group was started: an attempt that failed during
	// setup neither counts nor breaks a series.
	Ran bool
	// Resumed names the checkpoint the attempt resumed from; "" for
	// none (it started from scratch).
	Resumed string
	// Newer says a newer checkpoint appeared before the attempt ended.
	Newer bool
}

// Breaker counts the restarts in a row that made no progress.
type Breaker struct {
	inARow int
}

// Judge takes a failed attempt's progress into account and returns why
// the run must stop, or nil. limit is max_restarts_without_progress (0:
// off); lastFailure is the attempt's error.
func (b *Breaker) Judge(limit int, p Progress, lastFailure error) error {
	if !p.Ran {
		return nil
	}
	if limit <= 0 || p.Resumed == "" || p.Newer {
		b.inARow = 0
		return nil
	}
	b.inARow++
	if b.inARow < limit {
		return nil
	}
	noun := "restarts"
	if b.inARow == 1 {
		noun = "restart"
	}
	return fmt.Errorf("%d %s in a row made no progress: every attempt resumed from %s and failed before a newer checkpoint; last failure: %v "+
		"(fix the failure, or raise max_restarts_without_progress = %d)", b.inARow, noun, p.Resumed, lastFailure, limit)
}
