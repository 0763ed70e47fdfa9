package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Need skips outside CI and fails under CI=true: checked in a child
// process, since a skip or a failure ends the test that meets it.
func TestNeedSkipsHereFailsUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Need(t, "a thing", errors.New("not installed"))
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "needs a thing: not installed"},
		{"true", true, "a thing is needed and missing under CI=true"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeedSkipsHereFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.wantFail || !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: err %v, output:\n%s", tc.ci, err, out)
		}
		if !tc.wantFail && !strings.Contains(string(out), "--- SKIP") {
			t.Errorf("CI=%q: not skipped:\n%s", tc.ci, out)
		}
	}
}

func TestNeedNilDoesNothing(t *testing.T) {
	Need(t, "anything", nil)
}

// The pid must still name the process that started at the recorded tick:
// one that started at another (the pid handed on) is not signalled.
func TestSignalIfSame(t *testing.T) {
	c := exec.Command("sleep", "100")
	require.NoError(t, c.Start())
	pid := c.Process.Pid
	start, ok := startTicks(pid)
	require.True(t, ok)
	assert.False(t, signalIfSame(pid, start+1, syscall.SIGKILL, false), "another process's start time")
	_, ok = startTicks(pid)
	assert.True(t, ok, "sleep was signalled all the same")
	t.Run("cleanup", func(t *testing.T) { SignalAtCleanup(t, pid, syscall.SIGKILL, false) })
	var ee *exec.ExitError
	require.ErrorAs(t, c.Wait(), &ee)
	assert.Equal(t, "signal: killed", ee.Error())
	_, ok = startTicks(pid)
	assert.False(t, ok)
	assert.False(t, signalIfSame(pid, start, syscall.SIGKILL, false), "a pid that ended")
}
