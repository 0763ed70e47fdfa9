package top

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
)

// A host that sent a sample within Stale is up; one silent for longer
// is unreachable, and says for how long, before its connection even
// fails (a pulled cable never closes it).
func TestViewStale(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0
	w := &Watcher{job: "j", now: func() time.Time { return now }, hosts: []*topHost{
		{state: Host{Host: "a", Reachable: true, LastSeen: t0}},
		{state: Host{Host: "b", Error: "connecting"}},
	}}
	now = t0.Add(2 * time.Second)
	v := w.View()
	assert.True(t, v.Hosts[0].Reachable)
	assert.False(t, v.Hosts[1].Reachable)
	assert.Equal(t, "connecting", v.Hosts[1].Error)
	assert.NotNil(t, v.Hosts[1].GPUs, "JSON shows [] rather than null")

	now = t0.Add(Stale + time.Second)
	v = w.View()
	assert.False(t, v.Hosts[0].Reachable)
	assert.Equal(t, "no answer for 4s", v.Hosts[0].Error)
}

// RatesKnown: every process of a reachable host that reports a step also
// has its rate; a process with no step, or an unreachable host, does not
// hold --once up.
func TestRatesKnown(t *testing.T) {
	step, rate := int64(5), 2.5
	stepped := agent.TopProc{Name: "w0", Step: &step}
	rated := agent.TopProc{Name: "w1", Step: &step, StepRate: &rate}
	for _, tt := range []struct {
		name  string
		hosts []Host
		want  bool
	}{
		{"no hosts", nil, true},
		{"no steps", []Host{{Reachable: true, Procs: []agent.TopProc{{Name: "w0"}}}}, true},
		{"a step without its rate", []Host{{Reachable: true, Procs: []agent.TopProc{rated, stepped}}}, false},
		{"every step rated", []Host{{Reachable: true, Procs: []agent.TopProc{rated}}, {Reachable: true, Procs: []agent.TopProc{rated}}}, true},
		{"an unreachable host's", []Host{{Reachable: true, Procs: []agent.TopProc{rated}}, {Procs: []agent.TopProc{stepped}}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, RatesKnown(View{Hosts: tt.hosts}))
		})
	}
}

// WaitRates returns at the sample that brings the last rate, and at the
// end of its window when a rate never comes (a job slower than that).
func TestWaitRates(t *testing.T) {
	step, rate := int64(5), 2.5
	sampled := make(chan struct{}, 1)
	th := &topHost{state: Host{Host: "a", Reachable: true, LastSeen: time.Now(), Procs: []agent.TopProc{{Name: "w0", Step: &step}}}, sampled: sampled}
	w := &Watcher{job: "j", now: time.Now, hosts: []*topHost{th}, sampled: sampled}

	done := make(chan struct{})
	go func() {
		defer close(done)
		w.WaitRates(context.Background(), time.Hour)
	}()
	th.mu.Lock()
	// A new sample replaces the state, as stream does: View's copies
	// share the old one's Procs.
	th.state.Procs = []agent.TopProc{{Name: "w0", Step: &step, StepRate: &rate}}
	th.state.LastSeen = time.Now()
	th.mu.Unlock()
	th.signalSample()
	testenv.WaitFor(t, 10*time.Second, "WaitRates to return at the sample with the rate", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})

	th.state.Procs = []agent.TopProc{{Name: "w0", Step: &step}}
	start := time.Now()
	w.WaitRates(context.Background(), 50*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "the window, when no rate comes")
}
