package launcher

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
