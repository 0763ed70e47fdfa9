package launcher

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
)

// The run's first read of a host only records the Xids its kernel log
// holds (they happened before the run); later reads judge what is new,
// once.
func TestNewXIDs(t *testing.T) {
	var h healthState
	old := gpu.XID{Code: 79, Key: "[1.0] old"}
	fresh := gpu.XID{Code: 48, Key: "[2.0] new"}
	assert.Empty(t, h.newXIDs("h1", []gpu.XID{old}), "baseline")
	assert.Equal(t, []gpu.XID{fresh}, h.newXIDs("h1", []gpu.XID{old, fresh}))
	assert.Empty(t, h.newXIDs("h1", []gpu.XID{old, fresh}), "judged once")
	assert.Empty(t, h.newXIDs("h2", []gpu.XID{fresh}), "each host has its own baseline")
}

func TestFence(t *testing.T) {
	var h healthState
	f := gpu.Finding{Host: "h1", GPU: "GPU 1", Critical: true, What: "Xid 79"}
	_, ok := h.fencedFor("h1")
	assert.False(t, ok)
	h.fence("h1", f)
	h.fence("h1", gpu.Finding{Host: "h1", What: "later"})
	got, ok := h.fencedFor("h1")
	assert.True(t, ok)
	assert.Equal(t, f, got, "the first finding stays")
}

// Issue 41: a host the health gate keeps out with no spare left is left
// out of the group when min_hosts lets the rest go on (the same attempt
// is set up again without it); below min_hosts, or without it, the run
// fails before anything starts, naming min_hosts among the fixes.
func TestKeepOutLeavesOutWithMinHosts(t *testing.T) {
	for _, tc := range []struct {
		minHosts int
		want     outcomeKind
	}{{2, outcomeFenced}, {3, outcomeSetupFailed}, {0, outcomeSetupFailed}} {
		var buf bytes.Buffer
		r := newRunner(RunOptions{Events: &buf})
		cfg := &config.Config{Job: config.Job{MinHosts: tc.minHosts},
			Hosts: []config.Host{localHost("a", false), localHost("b", false), localHost("c", false)}}
		a := &attempt{r: r, cfg: cfg, n: 1, total: 1}
		f := gpu.Finding{Host: "c", GPU: "GPU 0", Critical: true, What: "Xid 79"}
		out := a.keepOut(&UnhealthyError{Findings: []gpu.Finding{f}})
		assert.Equal(t, tc.want, out.kind, "min_hosts = %d", tc.minHosts)
		_, fenced := r.fencedFor("c")
		assert.True(t, fenced)
		if tc.want == outcomeFenced {
			assert.Equal(t, map[string]bool{"c": true}, r.left)
			assert.Contains(t, buf.String(), "attempt 1/1: c kept out (GPU health: GPU 0 Xid 79) and no spare host is left: going on without it (min_hosts = 2)")
			continue
		}
		assert.Empty(t, r.left)
		assert.Contains(t, out.err.Error(), "set min_hosts to train on without it")
	}
}
