package straggler

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// on_straggler = "replace" (docs/health.md#stragglers): a straggler's
// host is set aside and a free spare takes its place, at the group's next
// checkpoint so that the restart loses no steps. That checkpoint must be
// held off the straggler's host (written by another host too, or drover's
// copy of it done): the host is set aside for good, and the restart stages
// only from the hosts it keeps and the mirror, so a checkpoint that only
// the straggler's host holds (rank 0 writes there) would be passed over
// for an older one. Decide is the decision, pure and table-tested;
// Replacer the thin loop that feeds it.

// Action is what "replace" does about a named straggler now.
type Action int

const (
	// Keep: nothing to do (the rank is not named, or already handled).
	Keep Action = iota
	// Wait: a spare is free; wait for the group's next checkpoint.
	Wait
	// WaitCopy: the next checkpoint is recorded but only the straggler's
	// host holds it; wait for drover's copy of it elsewhere (said once).
	WaitCopy
	// NoCopy: as WaitCopy, but drover makes no copies
	// (checkpoint_copies = 1, no checkpoint_mirror), so none will come
	// unless another host writes one: the rank is only named for now
	// (said once).
	NoCopy
	// Replace: a checkpoint newer than the naming is complete; stop the
	// group and restart it from it with the spare in the host's place.
	Replace
	// NoSpare: no spare is free; the rank is only named, as "warn" does,
	// and the event says so (once).
	NoSpare
)

func (a Action) String() string {
	switch a {
	case Keep:
		return "keep"
	case Wait:
		return "wait"
	case Replace:
		return "replace"
	case NoSpare:
		return "no spare"
	case WaitCopy:
		return "wait for a copy"
	case NoCopy:
		return "no copy"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// ReplaceState is what Decide looks at.
type ReplaceState struct {
	// Named says the straggler is named still: one let go (it keeps up
	// again) is not replaced.
	Named bool
	// SpareFree says a spare host is free to stand in.
	SpareFree bool
	// Told says NoSpare was said for this straggler already.
	Told bool
	// AtNaming is the newest checkpoint's Seq when the rank was named (0:
	// none); Newest the newest's now, and Kept the newest's that a group
	// without the straggler's host can restart from (held elsewhere or
	// in the mirror: checkpoint.RestorableWithout).
	AtNaming, Newest, Kept int
	// Copies says drover copies checkpoints off the host that wrote them
	// (checkpoint_copies of 2 or more, or a checkpoint_mirror).
	Copies bool
	// ToldCopy says WaitCopy or NoCopy was said for this straggler
	// already.
	ToldCopy bool
}

// Decide is what to do about a straggler in state s.
func Decide(s ReplaceState) Action {
	switch {
	case !s.Named:
		return Keep
	case !s.SpareFree && s.Told:
		return Keep
	case !s.SpareFree:
		return NoSpare
	case s.Kept > s.AtNaming:
		return Replace
	case s.Newest > s.AtNaming && !s.ToldCopy && s.Copies:
		return WaitCopy
	case s.Newest > s.AtNaming && !s.ToldCopy:
		return NoCopy
	}
	return Wait
}

// NoCopyWhy says why drover makes no copy of a checkpoint off the host
// that wrote it, and what to set instead, in a group of hosts hosts with
// checkpoint_copies = copies and a checkpoint_mirror or not; "" when it
// makes one (ReplaceOptions.Copies). Copies go to other hosts of the
// group, so a group of one host has none to go to.
func NoCopyWhy(copies, hosts int, mirror bool) string {
	switch {
	case mirror:
		return ""
	case copies <= 1:
		return fmt.Sprintf("checkpoint_copies = %d, no checkpoint_mirror; set checkpoint_copies = 2", copies)
	case hosts <= 1:
		return "the group's only host, no checkpoint_mirror; set checkpoint_mirror"
	}
	return ""
}

// What is the finding's message without its "straggler: rank R (P@H) "
// head: what the rank does ("spends 12x its peers' CPU per step ...").
func (f Finding) What() string {
	head := "straggler: " + who(Sample{Process: f.Process, Host: f.Host, Rank: f.Rank}) + " "
	return strings.TrimPrefix(f.Message, head)
}

// ReplaceOptions are what Replacer needs of the run.
type ReplaceOptions struct {
	// Newest is the Seq of the newest checkpoint drover recorded (0:
	// none); Kept the Seq of the newest that a group without host can
	// restart from (checkpoint.RestorableWithout).
	Newest func() int
	Kept   func(host string) int
	// Copies says drover copies checkpoints off the host that wrote them
	// (ReplaceState.Copies).
	Copies bool
	// SpareFree says whether a spare is free to stand in for host.
	SpareFree func(host string) bool
	// Every is how often a waiting replacement looks for a new
	// checkpoint; 0 is a second.
	Every time.Duration
	// Replace is told, once, the straggler to replace now; NoSpare each
	// straggler no spare is free for, once; Waiting each straggler whose
	// replacement waits for a checkpoint, once; WaitCopy (NoCopy) each
	// whose next checkpoint only its own host holds, once (Action).
	Replace, NoSpare, Waiting, WaitCopy, NoCopy func(Finding)
}

// Replacer follows the stragglers a Watch names and lets go (Named,
// Cleared, from the Watch's goroutine) and, in Run, tells o what to do
// about them. It asks for one replacement at most: the restart ends the
// attempt it watches.
type Replacer struct {
	o       ReplaceOptions
	named   chan pending
	cleared chan Finding
	// done closes when Run returns: the watch's hand-overs then go
	// nowhere rather than block it.
	done chan struct{}
}

// pending is a straggler named, and the newest checkpoint then.
type pending struct {
	f        Finding
	atNaming int
	told     bool
	waiting  bool
	toldCopy bool
}

// NewReplacer makes a Replacer; Run it in a goroutine of its own.
func NewReplacer(o ReplaceOptions) *Replacer {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	return &Replacer{o: o, named: make(chan pending), cleared: make(chan Finding), done: make(chan struct{})}
}

// Named hands r a straggler the watch named, with the newest checkpoint
// now: the replacement waits for one newer.
func (r *Replacer) Named(f Finding) {
	select {
	case r.named <- pending{f: f, atNaming: r.o.Newest()}:
	case <-r.done:
	}
}

// Cleared hands r a straggler the watch let go.
func (r *Replacer) Cleared(f Finding) {
	select {
	case r.cleared <- f:
	case <-r.done:
	}
}

// Run decides about every straggler named until ctx ends or it asked
// for a replacement.
func (r *Replacer) Run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.o.Every)
	defer t.Stop()
	var ps []*pending
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.named:
			ps = append(ps, &p)
		case f := <-r.cleared:
			for i, p := range ps {
				if p.f.Process == f.Process && p.f.Signal == f.Signal {
					ps = append(ps[:i], ps[i+1:]...)
					break
				}
			}
			continue
		case <-t.C:
		}
		if r.round(ps) {
			return
		}
	}
}

// round decides about each pending straggler once; true when it asked
// for a replacement.
func (r *Replacer) round(ps []*pending) bool {
	newest := -1
	for _, p := range ps {
		if newest < 0 {
			newest = r.o.Newest()
		}
		a := Decide(ReplaceState{Named: true, SpareFree: r.o.SpareFree(p.f.Host), Told: p.told, AtNaming: p.atNaming,
			Newest: newest, Kept: r.o.Kept(p.f.Host), Copies: r.o.Copies, ToldCopy: p.toldCopy})
		switch a {
		case NoSpare:
			p.told = true
			r.o.NoSpare(p.f)
		case Wait, WaitCopy, NoCopy:
			if !p.waiting {
				p.waiting = true
				r.o.Waiting(p.f)
			}
			if a == WaitCopy {
				p.toldCopy = true
				r.o.WaitCopy(p.f)
			} else if a == NoCopy {
				p.toldCopy = true
				r.o.NoCopy(p.f)
			}
		case Replace:
			r.o.Replace(p.f)
			return true
		}
	}
	return false
}
