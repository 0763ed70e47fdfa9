package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTB records what Wait reports through Fatalf instead of ending the
// test, so that a timeout can be asserted on.
type fakeTB struct {
	testing.TB
	mu    sync.Mutex
	fatal []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
}

func TestWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		holdsFrom int // the check from which cond holds; 0: never
		status    bool
		wantFatal string
		wantTook  time.Duration
	}{
		{name: "holds at once", holdsFrom: 1},
		{name: "holds on the fifth check", holdsFrom: 5, wantTook: 10*time.Millisecond + 20*time.Millisecond + 40*time.Millisecond + 80*time.Millisecond},
		{name: "never holds, with a status", status: true, wantFatal: "waited 2s for the thing; last seen: check 13", wantTook: 2 * time.Second},
		{name: "never holds, no status", wantFatal: "waited 2s for the thing", wantTook: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTB{TB: t}
				checks := 0
				start := time.Now()
				Wait(f, 2*time.Second, "the thing", func() (bool, string) {
					checks++
					if !tc.status {
						return checks == tc.holdsFrom, ""
					}
					return checks == tc.holdsFrom, fmt.Sprintf("check %d", checks)
				})
				if took := time.Since(start); took != tc.wantTook {
					t.Errorf("took %s, want %s", took, tc.wantTook)
				}
				if tc.wantFatal == "" {
					if len(f.fatal) != 0 {
						t.Errorf("failed: %q", f.fatal)
					}
					return
				}
				if len(f.fatal) != 1 || f.fatal[0] != tc.wantFatal {
					t.Errorf("failed with %q, want one %q", f.fatal, tc.wantFatal)
				}
			})
		})
	}
}

// The poll backs off to maxPoll and the last check falls on the deadline.
func TestWaitChecksAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTB{TB: t}
		start := time.Now()
		var at []time.Duration
		WaitFor(f, time.Second, "nothing", func() bool {
			at = append(at, time.Since(start))
			return false
		})
		want := []time.Duration{0, 10, 30, 70, 150, 310, 560, 810, 1000}
		got := make([]string, len(at))
		for i, d := range at {
			got[i] = fmt.Sprint(d / time.Millisecond)
		}
		if fmt.Sprint(want) != "["+strings.Join(got, " ")+"]" {
			t.Errorf("checked at %v ms, want %v", got, want)
		}
		if len(f.fatal) != 1 || f.fatal[0] != "waited 1s for nothing" {
			t.Errorf("failed with %q", f.fatal)
		}
	})
}

// WaitEvery does not back off.
func TestWaitEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTB{TB: t}
		checks := 0
		WaitEvery(f, 5*time.Millisecond, time.Second, "nothing", func() bool { checks++; return false })
		if checks != 201 {
			t.Errorf("%d checks in 1 s every 5 ms, want 201", checks)
		}
		if len(f.fatal) != 1 || f.fatal[0] != "waited 1s for nothing" {
			t.Errorf("failed with %q", f.fatal)
		}
	})
}
