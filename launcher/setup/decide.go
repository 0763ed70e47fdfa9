package setup

import (
	"fmt"
	"maps"
	"slices"
)

// Absent is the digest a setup_key file that does not exist on the host
// is recorded with: creating it later is a change like any other.
const Absent = "absent"

// Stamp is what a host's setup ran for: written to the host after a
// successful setup, compared with what the host would record now before
// the next.
type Stamp struct {
	// Lines are the setup lines, as the job file lists them.
	Lines []string `json:"lines"`
	// Keys maps each setup_key file (relative to the workdir) to the
	// SHA-256 of its content on the host, hex, or Absent.
	Keys map[string]string `json:"keys"`
	// Arch is the host's machine architecture (`uname -m`): an
	// environment built for one is not one for another, and a workdir can
	// move to a new machine on a shared file system.
	Arch string `json:"arch"`
}

// Decision is whether a host runs its setup, and why, for the event that
// says so.
type Decision struct {
	Run bool
	Why string
}

// Decide says whether a host whose last successful setup left last (nil:
// none, or unreadable) must run setup to be as want describes; force runs
// it whatever the stamp says (`drover setup --force`).
func Decide(last *Stamp, want Stamp, force bool) Decision {
	switch {
	case force:
		return Decision{true, "forced"}
	case last == nil:
		return Decision{true, "not set up here before"}
	case !slices.Equal(last.Lines, want.Lines):
		return Decision{true, "the setup lines changed"}
	case last.Arch != want.Arch:
		return Decision{true, fmt.Sprintf("the architecture changed (%s, now %s)", last.Arch, want.Arch)}
	}
	for _, k := range slices.Sorted(maps.Keys(want.Keys)) {
		if old, ok := last.Keys[k]; !ok || old != want.Keys[k] {
			return Decision{true, k + " changed"}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(last.Keys)) {
		if _, ok := want.Keys[k]; !ok {
			return Decision{true, "setup_key no longer lists " + k}
		}
	}
	return Decision{false, "unchanged since its last setup"}
}
