package main

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
)

// gcSettings reads the collector's percent and memory limit.
func gcSettings() (int, int64) {
	pct := debug.SetGCPercent(100)
	debug.SetGCPercent(pct)
	return pct, debug.SetMemoryLimit(-1)
}

// TestStartingHeap: no collection by pace until the first one (at the
// memory limit, or forced), then the default pace and no limit; and the
// environment's GOGC wins. Not parallel: it changes the process's GC.
func TestStartingHeap(t *testing.T) {
	pct, limit := gcSettings()
	t.Cleanup(func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	})

	t.Setenv("GOGC", "50")
	startingHeap(1 << 30)
	p, l := gcSettings()
	assert.Equal(t, pct, p, "GOGC set: untouched")
	assert.Equal(t, limit, l)

	t.Setenv("GOGC", "")
	startingHeap(1 << 30)
	p, l = gcSettings()
	assert.Equal(t, -1, p)
	assert.Equal(t, int64(1<<30), l)
	testenv.Wait(t, 5*time.Second, "GOGC=100 and no limit after the first collection", func() (bool, string) {
		runtime.GC()
		p, l = gcSettings()
		return p == 100 && l == math.MaxInt64, fmt.Sprintf("got %d, %d", p, l)
	})
}
