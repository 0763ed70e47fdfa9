package main

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTreeTicksCountsReapedChildren: the sshd figure relies on a
// process's stat counting the CPU of the children it waited for.
func TestTreeTicksCountsReapedChildren(t *testing.T) {
	before, err := treeTicks("/proc", os.Getpid())
	require.NoError(t, err)
	busy := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	require.NoError(t, busy.Run())
	child := busy.ProcessState.UserTime() + busy.ProcessState.SystemTime()
	after, err := treeTicks("/proc", os.Getpid())
	require.NoError(t, err)
	// Ticks are 10 ms; the child's own accounting rounds the same way.
	assert.GreaterOrEqual(t, after-before, uint64(child.Milliseconds()/10), "child used %v", child)
	assert.Positive(t, after-before, "a reaped busy child adds to the parent's cutime")
}

func TestVmHWM(t *testing.T) {
	kb, err := vmHWM(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, kb)
	_, err = vmHWM(-1)
	assert.Error(t, err)
}
