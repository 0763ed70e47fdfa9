package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
)

// A run id names a detached run's directory on every host
// (`.drover/runs/<id>`), its entries in a host's live index, and this
// machine's `~/.drover/supervised/<id>.json`. Hosts report it back (their
// run record, their `current` link), and a host may lie: every reader
// checks it with CheckRunID before it becomes part of a path, and only
// drover's own format (NewRunID's) passes.

// runIDPattern is NewRunID's format: the start time to the second, UTC,
// and six hex digits.
var runIDPattern = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$`)

// NewRunID is a fresh run id: the start time and a random suffix, so that
// ids sort by age and two machines never pick the same one.
func NewRunID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// RunIDError is a run id that is not drover's: a host's record or link,
// or a local file, that names a run in another format.
type RunIDError struct {
	ID string // as read (quote it before showing it)
}

func (e *RunIDError) Error() string {
	id := e.ID
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return fmt.Sprintf("run id %q is not drover's (YYYYMMDD-HHMMSS-xxxxxx): not a run drover started, refused", id)
}

// CheckRunID reports whether id is a run id drover made (NewRunID): the
// only ones drover turns into paths.
func CheckRunID(id string) error {
	if !runIDPattern.MatchString(id) {
		return &RunIDError{ID: id}
	}
	return nil
}
