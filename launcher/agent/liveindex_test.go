//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/internal/testenv"
)

// Entries of the host's live-run index (~/.drover/live) pointing at what
// is no state record: `drover agent runs` (Report with no workdir) reads
// each bounded, regular files only, without blocking, and still lists
// the live process beside them. Before the fix an entry at /dev/zero
// drove it to 11.7 GB and one at a FIFO hung it past SIGTERM.
func TestLiveIndexHostileEntries(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	index := filepath.Join(home, IndexDir)
	require.NoError(t, os.MkdirAll(index, 0o700))
	fifo := filepath.Join(home, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	big := filepath.Join(home, "big.json")
	require.NoError(t, os.WriteFile(big, make([]byte, maxStateFile+1), 0o600))
	// A live process that passes for an agent (isAgent: "agent" in its
	// argv), as the detached one would.
	agentLike := exec.Command("sh", "-c", "sleep 1000; :", "agent")
	require.NoError(t, agentLike.Start())
	t.Cleanup(func() { _ = agentLike.Process.Kill(); _ = agentLike.Wait() })
	pid := agentLike.Process.Pid
	live := filepath.Join(home, "live.json")
	require.NoError(t, writeJSON(live, State{RunID: "r1", Name: "worker-0", State: ProcRunning,
		AgentPid: pid, AgentStart: startTicks(pid)}))
	for name, target := range map[string]string{"r0.fifo": fifo, "r0.zero": "/dev/zero", "r0.big": big, "r1.worker-0": live} {
		require.NoError(t, os.Symlink(target, filepath.Join(index, name)))
	}
	type result struct {
		rep *HostReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Report("", "")
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Len(t, r.rep.Processes, 1)
		assert.Equal(t, "r1", r.rep.Processes[0].RunID)
	case <-time.After(10 * time.Second):
		t.Fatal("agent runs hangs on an index entry")
	}
	for _, name := range []string{"r0.fifo", "r0.zero", "r0.big"} {
		_, err := os.Lstat(filepath.Join(index, name))
		assert.ErrorIs(t, err, os.ErrNotExist, "the entry %s names no live process and is dropped", name)
	}
}

// The index entry and the state record change in the order readers rely
// on: a record that says running has its entry, a final one has none
// (TestDetachedAgentOutlivesChannel failed 2 runs in 10 when the final
// record came first). A reader spinning on the record catches any window
// between the two writes within a few rounds.
func TestLiveIndexOrder(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for i := range 200 {
		d := &detached{path: filepath.Join(home, "runs", fmt.Sprintf("w%d.json", i)),
			st: State{RunID: "r1", Name: fmt.Sprintf("worker-%d", i), State: ProcStarting}}
		require.NoError(t, writeJSON(d.path, d.st))
		entry := d.st.indexEntry()
		go d.running(4242)
		spinUntil(t, d.path, func(st *State) bool { return st.State == ProcRunning })
		_, err := os.Lstat(entry)
		require.NoError(t, err, "round %d: the record says running before the index lists it", i)
		go d.end(ProcExited, 0, nil)
		spinUntil(t, d.path, (*State).Final)
		_, err = os.Lstat(entry)
		require.ErrorIs(t, err, os.ErrNotExist, "round %d: the record is final while the index still lists it", i)
	}
}

// spinUntil reads the record at path until ok says yes.
func spinUntil(t *testing.T, path string, ok func(*State) bool) {
	t.Helper()
	testenv.WaitEvery(t, time.Microsecond, 10*time.Second, "the record", func() bool {
		st, err := ReadState(path)
		return err == nil && ok(st)
	})
}
