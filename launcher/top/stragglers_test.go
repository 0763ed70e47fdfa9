package top

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/straggler"
)

// top names a process that spends 12x its peers' CPU per step once three
// rounds of new samples found it so (the view carries the line, which
// --once prints below the processes); a round whose samples are not new
// (a host that sent nothing since) does not count.
func TestJudgeStragglers(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0
	w := &Watcher{job: "j", now: func() time.Time { return now }}
	for h := range 3 {
		w.hosts = append(w.hosts, &topHost{state: Host{Host: fmt.Sprintf("h%d", h)}})
	}
	sample := func(round int) {
		now = t0.Add(time.Duration(round) * 5 * time.Second)
		for h, th := range w.hosts {
			var procs []agent.TopProc
			for l := range 2 {
				n := 2*h + l
				perStep := 0.01
				if n == 2 {
					perStep = 0.12
				}
				step, cpu := int64(10*round), float64(10*round)*perStep
				procs = append(procs, agent.TopProc{Name: fmt.Sprintf("worker-%d", n), Step: &step, CPUSeconds: &cpu})
			}
			th.state = Host{Host: th.state.Host, Reachable: true, LastSeen: now, Procs: procs}
		}
	}
	d := straggler.New(straggler.Policy{Factor: 3})
	seen := map[string]time.Time{}
	for round := range 3 {
		sample(round)
		w.judge(d, seen)
		w.judge(d, seen) // nothing new: no round
		assert.Empty(t, w.View().Stragglers, "round %d", round)
	}
	sample(3)
	w.judge(d, seen)
	assert.Equal(t, []string{"straggler: worker-2@h1 spends 12x its peers' CPU per step (0.120s against 0.010s)"}, w.View().Stragglers)
}
