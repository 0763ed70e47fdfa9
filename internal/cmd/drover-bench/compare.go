package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// contender is one tool in a side-by-side comparison.
type contender struct {
	Name string
	Run  func(ctx context.Context) (procStats, error)
}

// outcome is what one contender did over the repetitions.
type outcome struct {
	Times []time.Duration
	// CPU is each run's user+sys time of the tool and the children it
	// waited for; ServerCPU the fleet's sshd CPU over the same run
	// (compareOptions.ServerCPU; empty without it).
	CPU       []time.Duration
	ServerCPU []time.Duration
	MaxRSS    int64 // KiB, the largest of its runs
	Err       error // the first failure; later repetitions skip it
}

// Measure is the median of the outcome, or why there is none.
func (o outcome) Measure() Measure {
	if o.Err != nil {
		return na("%s", reason(o.Err))
	}
	return medianOf(o.Times)
}

// compareOptions shape a comparison.
type compareOptions struct {
	Reps   int
	Warmup bool // one untimed run of each contender first
	// Before runs before every repetition (reset remote dirs, change a
	// file); an error there ends the comparison.
	Before func(rep int) error
	// Settle, when set, runs before every timed run of every contender:
	// it waits until the previous tool's sshd sessions have ended, so no
	// tool is timed while the one before it is still being cleaned up.
	Settle func(ctx context.Context)
	// ServerCPU, when set, reads the fleet's sshd CPU so far: compare
	// settles the fleet after each run too and records the difference.
	ServerCPU func() (time.Duration, error)
	// Progress receives one line per repetition.
	Progress func(format string, args ...any)
}

// compare runs the contenders in turns: every repetition runs each once,
// starting with a different one each time so that none always profits from
// (or pays for) going first. A contender that fails is dropped from later
// repetitions and its figure becomes n/a with the reason; the others go on.
// When ctx ends, what was measured so far is kept.
func compare(ctx context.Context, cs []contender, o compareOptions) ([]outcome, error) {
	out := make([]outcome, len(cs))
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if o.Warmup {
		for i, c := range cs {
			if ctx.Err() != nil {
				break
			}
			if _, err := c.Run(ctx); err != nil {
				out[i].Err = fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	var stopErr error
	for rep := 0; rep < o.Reps; rep++ {
		if ctx.Err() != nil {
			stopErr = fmt.Errorf("out of time after %d of %d runs", rep, o.Reps)
			break
		}
		if o.Before != nil {
			if err := o.Before(rep); err != nil {
				stopErr = err
				break
			}
		}
		line := fmt.Sprintf("  run %d/%d:", rep+1, o.Reps)
		for k := range cs {
			i := (rep + k) % len(cs)
			if out[i].Err != nil || ctx.Err() != nil {
				continue
			}
			if o.Settle != nil {
				o.Settle(ctx)
			}
			var srv0 time.Duration
			var srvErr error
			if o.ServerCPU != nil {
				srv0, srvErr = o.ServerCPU()
			}
			st, err := cs[i].Run(ctx)
			if err != nil {
				if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
					// The section's budget ran out under it: not its fault.
					continue
				}
				out[i].Err = err
				line += fmt.Sprintf(" %s failed (%s)", cs[i].Name, reason(err))
				continue
			}
			out[i].Times = append(out[i].Times, st.Wall)
			out[i].CPU = append(out[i].CPU, st.CPU)
			if o.ServerCPU != nil && srvErr == nil {
				if o.Settle != nil {
					o.Settle(ctx)
				}
				if srv1, err := o.ServerCPU(); err == nil {
					out[i].ServerCPU = append(out[i].ServerCPU, srv1-srv0)
				}
			}
			out[i].MaxRSS = max(out[i].MaxRSS, st.MaxRSS)
			line += fmt.Sprintf(" %s %s", cs[i].Name, Measure{Value: st.Wall.Seconds(), N: 1})
		}
		o.Progress("%s", line)
	}
	for i := range out {
		if out[i].Err == nil && len(out[i].Times) == 0 {
			switch {
			case stopErr != nil:
				out[i].Err = stopErr
			default:
				out[i].Err = errors.New("out of time before the first run")
			}
		}
	}
	return out, stopErr
}
