package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exitCode is cmd's exit status once Wait returned err.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee != nil {
		return ee.ExitCode()
	}
	return 0
}

// A detached agent outlives its channel: end of input only detaches the
// launcher, the command runs on and its log grows; an attach client then
// streams the log from an offset (each byte once) and its "kill" line
// stops the group, which the state record and the index then say.
func TestDetachedAgentOutlivesChannel(t *testing.T) {
	bin := droverBinary(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	state, log := filepath.Join(dir, "w.json"), filepath.Join(dir, "w.log")
	argv := Command(bin, RunOptions{
		Args:  []string{"sh", "-c", `i=0; while :; do echo "n=$i"; i=$((i+1)); sleep 0.05; done`},
		Grace: time.Minute, LogFile: log, State: state, RunID: "20260101-000000-0000a1", Attempt: 1, Rank: 0, Name: "worker-0",
	})
	env := append(os.Environ(), "HOME="+home)
	launcher := exec.Command(argv[0], argv[1:]...)
	launcher.Env = env
	in, err := launcher.StdinPipe()
	require.NoError(t, err)
	var out capture
	launcher.Stdout = &out
	require.NoError(t, launcher.Start())
	out.waitFor(t, "n=5\n", 10*time.Second)
	st, err := ReadState(state)
	require.NoError(t, err)
	testenv.SignalAtCleanup(t, st.Pid, syscall.SIGKILL, true)
	testenv.SignalAtCleanup(t, st.AgentPid, syscall.SIGKILL, false)
	require.NoError(t, in.Close()) // the controller is gone
	assert.Equal(t, ExitDetached, exitCode(t, launcher.Wait()))

	assert.Equal(t, ProcRunning, st.State)
	assert.True(t, isAgent(st.AgentPid, st.AgentStart), "the detached agent runs on")
	index := filepath.Join(home, IndexDir, "20260101-000000-0000a1.worker-0")
	target, err := os.Readlink(index)
	require.NoError(t, err, "the host's index lists the live process")
	assert.Equal(t, state, target)
	size := func() int64 { fi, _ := os.Stat(log); return fi.Size() }
	at := size()
	testenv.WaitFor(t, 10*time.Second, "the log to grow with no channel", func() bool { return size() > at+50 })

	from := size()
	attach := exec.Command(bin, AttachCommand("", AttachOptions{State: state, From: from})[1:]...)
	attach.Env = env
	ain, err := attach.StdinPipe()
	require.NoError(t, err)
	var got capture
	attach.Stdout = &got
	require.NoError(t, attach.Start())
	testenv.WaitFor(t, 10*time.Second, "the attach client to stream", func() bool { return strings.Count(got.String(), "\n") >= 5 })
	_, err = io.WriteString(ain, "kill\n")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- attach.Wait() }()
	select {
	case err := <-done:
		assert.Equal(t, 137, exitCode(t, err), "the command's status, as the agent reports a SIGKILL")
	case <-time.After(10 * time.Second):
		t.Fatal("the attach client did not end with the group")
	}
	whole, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(whole[from:], []byte(got.String())), "the attach client sent the log from %d, each byte once", from)
	final, err := ReadState(state)
	require.NoError(t, err)
	assert.Equal(t, ProcStopped, final.State)
	require.NotNil(t, final.Exit)
	assert.Equal(t, 137, *final.Exit)
	_, err = os.Lstat(index)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the index entry goes with the process")
}

// An attach client whose detached agent is killed (kill -9) does not wait
// for a record that will never be final: it says so and exits 137.
func TestAttachAgentKilled(t *testing.T) {
	bin := droverBinary(t)
	dir := t.TempDir()
	state, log := filepath.Join(dir, "w.json"), filepath.Join(dir, "w.log")
	argv := Command(bin, RunOptions{Args: []string{"sh", "-c", `echo started; exec sleep 1000`}, LogFile: log, State: state, RunID: "20260101-000000-0000a1", Name: "worker-0"})
	launcher := exec.Command(argv[0], argv[1:]...)
	launcher.Env = append(os.Environ(), "HOME="+filepath.Join(dir, "home"))
	in, err := launcher.StdinPipe()
	require.NoError(t, err)
	var out capture
	launcher.Stdout = &out
	require.NoError(t, launcher.Start())
	out.waitFor(t, "started\n", 10*time.Second)
	st, err := ReadState(state)
	require.NoError(t, err)
	testenv.SignalAtCleanup(t, st.Pid, syscall.SIGKILL, true)
	t.Cleanup(func() { in.Close() })
	require.NoError(t, syscall.Kill(st.AgentPid, syscall.SIGKILL))
	done := make(chan error, 1)
	go func() { done <- launcher.Wait() }()
	select {
	case err := <-done:
		assert.Equal(t, 137, exitCode(t, err))
	case <-time.After(10 * time.Second):
		t.Fatal("the attach client still waits for an agent that was killed")
	}
	assert.Contains(t, out.String(), MessagePrefix+"the detached agent (pid "+strconv.Itoa(st.AgentPid)+") died")
}
