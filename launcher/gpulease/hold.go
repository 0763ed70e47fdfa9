package gpulease

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// HoldOptions are what `drover agent gpu-lease` is told: which GPUs, how
// many, and who takes them.
type HoldOptions struct {
	Dir        string
	Candidates []Candidate
	// N is how many to take (0: every free one); Min the fewest to
	// start with.
	N, Min int
	// Me names the run (GPU and Key are filled per lease).
	Me Holder
	// Queue waits for the GPUs instead of failing; Hosts is how many
	// hosts the run waits for.
	Queue bool
	Hosts int
	// Poll is how often a waiter looks again (default 200ms).
	Poll time.Duration
}

// Event is one line `drover agent gpu-lease` prints, as JSON.
type Event struct {
	// State: "waiting" (Position of Waiters, Holders), "held" (GPUs),
	// "busy" (Holders; the agent exits 1), "error" (Error).
	State string `json:"state"`
	GPUs  []int  `json:"gpus,omitempty"`
	// Files are the held leases' paths on the host (for agent run's
	// --gpu-lease).
	Files    []string `json:"files,omitempty"`
	Position int      `json:"position,omitempty"`
	Waiters  int      `json:"waiters,omitempty"`
	Ahead    []Waiter `json:"ahead,omitempty"`
	Holders  []Holder `json:"holders,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// Hold takes the GPUs (waiting in the queue first with o.Queue), prints
// "held", and holds them until stdin ends (the controller closed the
// session or is gone) or ctx ends; then it gives them back. A take that
// finds too few free GPUs without o.Queue prints "busy" and returns the
// *BusyError.
func Hold(ctx context.Context, o HoldOptions, stdin io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, stdin); cancel() }()
	enc := json.NewEncoder(out)
	if err := Prepare(o.Dir); err != nil {
		enc.Encode(Event{State: "error", Error: err.Error()})
		return err
	}
	o.Me.AgentPID = os.Getpid()
	l, err := acquire(ctx, o, enc)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) {
			enc.Encode(Event{State: "busy", Holders: be.Holders})
		} else if !errors.Is(err, context.Canceled) {
			enc.Encode(Event{State: "error", Error: err.Error()})
		}
		return err
	}
	defer l.Release()
	enc.Encode(Event{State: "held", GPUs: l.GPUs, Files: l.Files()})
	<-ctx.Done()
	return nil
}

// acquire takes the GPUs; with o.Queue it enters the queue and takes
// them when first in it and they are free, unless the run holds leases
// here already (Keeps: a restart) and can take them now.
func acquire(ctx context.Context, o HoldOptions, enc *json.Encoder) (*Lease, error) {
	if !o.Queue {
		return Take(o.Dir, o.Candidates, o.N, o.Min, o.Me)
	}
	if live, err := List(o.Dir); err == nil && Keeps(live, o.Me.RunID, os.Getuid()) {
		if l, err := Take(o.Dir, o.Candidates, o.N, o.Min, o.Me); err == nil {
			return l, nil // a restart keeps its GPUs
		}
	}
	me := Waiter{Holder: o.Me, Hosts: o.Hosts}
	q, err := create(o.Dir, waitName(me), me)
	if err != nil {
		return nil, fmt.Errorf("enter the GPU queue in %s: %w", o.Dir, err)
	}
	defer q.release()
	poll := o.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	var last Event
	for {
		ws, err := Waiters(o.Dir)
		if err != nil {
			return nil, err
		}
		pos, of := Position(me, ws)
		var holders []Holder
		if pos == 1 {
			l, err := Take(o.Dir, o.Candidates, o.N, o.Min, o.Me)
			var be *BusyError
			if !errors.As(err, &be) {
				return l, err
			}
			holders = be.Holders
		} else if live, err := List(o.Dir); err == nil {
			_, err := Choose(o.Candidates, live, 0, len(o.Candidates)+1)
			var be *BusyError
			if errors.As(err, &be) {
				holders = be.Holders
			}
		}
		ev := Event{State: "waiting", Position: pos, Waiters: of, Ahead: ws[:min(pos-1, len(ws))], Holders: holders}
		if !sameWait(ev, last) {
			enc.Encode(ev)
			last = ev
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// sameWait says whether a waiting event says nothing new.
func sameWait(a, b Event) bool {
	return a.Position == b.Position && a.Waiters == b.Waiters &&
		slices.EqualFunc(a.Holders, b.Holders, func(x, y Holder) bool { return x.RunID == y.RunID && x.GPU == y.GPU })
}

// Waiters are the live entries of dir's queue, in the order it serves
// them.
func Waiters(dir string) ([]Waiter, error) {
	es, err := list(dir, waitSuffix)
	if err != nil {
		return nil, err
	}
	var ws []Waiter
	for _, e := range es {
		var w Waiter
		if !e.alive || json.Unmarshal(e.data, &w) != nil {
			continue
		}
		w.UID = e.uid
		ws = append(ws, w)
	}
	SortWaiters(ws)
	return ws, nil
}

// ReadEvents reads a gpu-lease session's lines, each to fn, until fn
// returns false or the stream ends; lines are bounded.
func ReadEvents(r io.Reader, fn func(Event) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("GPU lease agent said %q: %w", truncate(sc.Text()), err)
		}
		if !fn(ev) {
			return nil
		}
	}
	return sc.Err()
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
