package gpulease

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Holder names the run that holds a lease (or waits in the queue): what
// a lease file holds, as JSON, and what messages print.
type Holder struct {
	// GPU is the index of the leased GPU; Key names it in the file name
	// (its UUID where known, so that hosts sharing /tmp never collide).
	GPU int    `json:"gpu"`
	Key string `json:"key"`
	// Job, RunID: the run. User and UID: who started it.
	Job   string `json:"job"`
	RunID string `json:"run_id"`
	User  string `json:"user"`
	UID   int    `json:"uid"`
	// Host and PID are the controller: the machine and process of the
	// drover run that holds it; AgentPID is the agent on this host that
	// holds the lock.
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	AgentPID int       `json:"agent_pid"`
	Since    time.Time `json:"since"`
}

// String names the run, as messages print it.
func (h Holder) String() string {
	return fmt.Sprintf("the drover run of job %q by %s (controller %s, pid %d, run id %s, since %s)",
		h.Job, h.User, h.Host, h.PID, h.RunID, h.Since.UTC().Format(time.RFC3339))
}

// Candidate is a GPU a take may choose: its index and its key.
type Candidate struct {
	Index int    `json:"index"`
	Key   string `json:"key"`
}

// ParseCandidate reads "INDEX=KEY" (the agent's --gpu flag).
func ParseCandidate(s string) (Candidate, error) {
	i, key, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(i)
	if !ok || err != nil || n < 0 || !validKey(key) {
		return Candidate{}, fmt.Errorf("GPU %q: want INDEX=KEY (a GPU index and its UUID, letters, digits and '-')", s)
	}
	return Candidate{Index: n, Key: key}, nil
}

// String is the --gpu flag's form of c.
func (c Candidate) String() string { return strconv.Itoa(c.Index) + "=" + c.Key }

// validKey keeps keys usable as one file-name component.
func validKey(k string) bool {
	if k == "" || len(k) > 96 {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// BusyError is a take that found too few of its GPUs free: Holders are
// the live leases on the candidates it wanted.
type BusyError struct {
	Host    string
	Want    int // the fewest GPUs the take could start with
	Free    int
	Holders []Holder
}

func (e *BusyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d of the GPUs this job needs are free, it needs %d; ", e.Host, e.Free, e.Want)
	for i, h := range e.Holders {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "GPU %d is leased by %s", h.GPU, h)
	}
	b.WriteString(": pass --queue to wait for them")
	return b.String()
}

// Choose picks the GPUs a take gets from cands, in their order: those no
// live lease in held (by key) holds, n of them (n = 0: every free one),
// and at least min (at least one when min is 0). Fewer than that is a
// *BusyError naming the holders of the candidates.
func Choose(cands []Candidate, held map[string]Holder, n, min int) ([]Candidate, error) {
	if min < 1 {
		min = 1
	}
	if n > 0 && min < n {
		min = n
	}
	var free []Candidate
	var holders []Holder
	for _, c := range cands {
		if h, ok := held[c.Key]; ok {
			h.GPU = c.Index
			holders = append(holders, h)
			continue
		}
		if n == 0 || len(free) < n {
			free = append(free, c)
		}
	}
	if len(free) < min {
		return nil, &BusyError{Want: min, Free: len(free), Holders: holders}
	}
	return free, nil
}

// Waiter is a run in a host's queue: who, and when it entered (the
// controller's clock, the same on every host).
type Waiter struct {
	Holder
	// Hosts is how many hosts the run waits for, for messages.
	Hosts int `json:"hosts"`
}

// before orders waiters: first come, first served; the run id breaks
// ties, the same way on every host.
func before(a, b Waiter) int {
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	return cmp.Compare(a.RunID, b.RunID)
}

// Position is me's place in the queue of live waiters (1: next), and
// how many wait in all. A waiter not in the list (its entry not yet
// listed) counts as already there.
func Position(me Waiter, waiters []Waiter) (pos, of int) {
	pos, of = 1, 0
	seen := false
	for _, w := range waiters {
		of++
		if w.RunID == me.RunID {
			seen = true
			continue
		}
		if before(w, me) < 0 {
			pos++
		}
	}
	if !seen {
		of++
	}
	return pos, of
}

// SortWaiters orders ws as the queue serves them.
func SortWaiters(ws []Waiter) { slices.SortFunc(ws, before) }

// Keeps reports whether run (of user uid) holds a live lease among live:
// the run restarts, and its next attempt takes its GPUs back (joining
// the leases its last attempt holds until then) without waiting in the
// queue. Behind a waiter that waits for those very GPUs it would wait
// for ever, and a run's own restart is not a newcomer.
func Keeps(live map[string]Holder, run string, uid int) bool {
	for _, h := range live {
		if run != "" && h.RunID == run && h.UID == uid {
			return true
		}
	}
	return false
}
