package agent

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A pid names a process only with its start time: the same pid with
// another start is a later process that reused it.
func TestProcessAlive(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("start times are read from /proc")
	}
	me := os.Getpid()
	start := ProcessStart(me)
	assert.NotZero(t, start)
	assert.True(t, ProcessAlive(me, start))
	assert.True(t, ProcessAlive(me, 0), "no start recorded: the pid alone")
	assert.False(t, ProcessAlive(me, start+1), "the pid reused by another process")
	assert.False(t, ProcessAlive(0, 0))
}
