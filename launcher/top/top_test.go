package top

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
