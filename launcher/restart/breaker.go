package restart

import "fmt"

// The crash-loop breaker (max_restarts_without_progress): a script with a
// bug that no restart fixes fails the same way after every resume, and
// restarting it max_restarts times burns that many attempts of the whole
// fleet. A restart made progress when a new checkpoint appeared before it
// failed (Advanced): a new time on the one it resumed from is not one, as
// a script that touches its checkpoint before failing would otherwise
// never be stopped. The run stops after that many restarts in a row made
// none. An attempt that started from scratch is
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
	// Newer says a new checkpoint appeared before the attempt ended
	// (Advanced).
	Newer bool
	// Planned says drover ended the attempt itself to restart on other
	// hosts (Kind.Planned): it did so at a new checkpoint, which is
	// progress whether or not the copy of it was read yet, so the series
	// resets.
	Planned bool
}

// Checkpoint is what the breaker compares of the checkpoint an attempt
// resumed from and the newest one after it failed.
type Checkpoint struct {
	// Seq is its place in the order drover saw checkpoints complete; a
	// name saved again gets a new one, and so does a new time on it.
	Seq  int
	Name string
	// Digest is the sha256 of its MANIFEST (names, sizes, content), ""
	// until drover has read it (a copy, the mirror, a staging).
	Digest string
}

// Advanced says whether newest is progress over resumed: a later
// checkpoint under another name, or under the same name with other
// content. The same name with the same digest is the same checkpoint with
// a new time (a touch). Where drover has not read both, the content
// cannot be told and a later one counts: a script that saves one name
// again and again (latest.pt) must not be stopped for it.
func Advanced(resumed, newest Checkpoint) bool {
	if newest.Seq <= resumed.Seq {
		return false
	}
	if newest.Name != resumed.Name || newest.Digest == "" || resumed.Digest == "" {
		return true
	}
	return newest.Digest != resumed.Digest
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
	if limit <= 0 || p.Resumed == "" || p.Newer || p.Planned {
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
