package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
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
	// Ticks are 10 ms, and /proc truncates user and system time to
	// ticks separately: up to two ticks go missing.
	assert.GreaterOrEqual(t, int64(after-before), child.Milliseconds()/10-2, "child used %v", child)
	assert.Positive(t, after-before, "a reaped busy child adds to the parent's cutime")
}

func TestVmHWM(t *testing.T) {
	kb, err := vmHWM(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, kb)
	_, err = vmHWM(-1)
	assert.Error(t, err)
}

// TestCPUGroupCountsWhatItsMembersStart: a process moved into the group
// is counted with everything it starts, including a child that outlives
// it and that nobody in the group waits for (what the listeners' cutime
// misses).
func TestCPUGroupCountsWhatItsMembersStart(t *testing.T) {
	testenv.Root(t, "cgroups")
	// The parent waits for a signal on stdin before it starts its busy,
	// orphaned child, so it is in the group first.
	cmd := exec.Command("sh", "-c", `read go; (i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done > "$0") & exit 0`, t.TempDir()+"/done")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	g, err := newCPUGroup("drover-bench-test", []int{cmd.Process.Pid})
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		testenv.Need(t, "cgroup cpu accounting", err)
	}
	defer g.remove()
	before, err := g.usage()
	require.NoError(t, err)
	_, _ = stdin.Write([]byte("go\n"))
	require.NoError(t, cmd.Wait())
	testenv.WaitFor(t, 30*time.Second, "the orphaned child to finish", func() bool {
		_, err := os.Stat(cmd.Args[len(cmd.Args)-1])
		return err == nil
	})
	after, err := g.usage()
	require.NoError(t, err)
	assert.Greater(t, after-before, 20*time.Millisecond, "the orphan's loop is counted")
}
