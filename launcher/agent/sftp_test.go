//go:build linux

package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/testenv"
)

// TestSFTPLowPriority: `drover agent sftp --low-priority`, opened as
// drover opens it for checkpoint copies (cluster.OpenCommandFS), serves
// files, and every thread of it runs at nice 19 in the idle I/O class.
// Started as sshd starts it, in a session of its own (setsid), its
// autogroup gets nice 19 as well; started inside the caller's session, it
// leaves that session's autogroup alone.
func TestSFTPLowPriority(t *testing.T) {
	autogroup := func(pid int) string {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "autogroup"))
		if err != nil {
			return "" // a kernel without autogroups
		}
		return strings.TrimSpace(string(b))
	}
	ours := autogroup(os.Getpid())
	t.Run("own session", func(t *testing.T) {
		testenv.LookPath(t, "setsid")
		pid := sftpLowPriority(t, []string{"setsid", "--wait"})
		if ours != "" {
			assert.True(t, strings.HasSuffix(autogroup(pid), " nice 19"), "autogroup %q", autogroup(pid))
		}
	})
	t.Run("caller's session", func(t *testing.T) {
		pid := sftpLowPriority(t, nil)
		assert.Equal(t, ours, autogroup(pid), "the caller's autogroup")
		assert.Equal(t, ours, autogroup(os.Getpid()), "the caller's autogroup")
	})
}

// sftpLowPriority opens the agent's SFTP server through prefix (a command
// that runs it), checks that it serves and runs at low priority, and
// returns its pid while it still runs (closed at the test's end).
func sftpLowPriority(t *testing.T, prefix []string) int {
	bin := droverBinary(t)
	tr, err := cluster.NewLocal(cluster.Endpoint{Name: "here", Transport: cluster.TransportLocal})
	require.NoError(t, err)
	ctx := context.Background()
	argv := SFTPCommand(bin)
	fsys, err := cluster.OpenCommandFS(ctx, tr, append(slices.Clone(prefix), argv...))
	require.NoError(t, err)

	dir := t.TempDir()
	w, err := fsys.Create(filepath.Join(dir, "ck.bin"))
	require.NoError(t, err)
	_, err = w.Write([]byte("checkpoint"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	r, err := fsys.Open(filepath.Join(dir, "ck.bin"))
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	r.Close()
	assert.Equal(t, "checkpoint", string(got))

	pid := findProcess(t, argv)
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	require.NoError(t, err)
	require.NotEmpty(t, tasks)
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		assert.Equal(t, 19, niceOf(t, pid, tid), "nice of thread %d", tid)
		prio, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
		require.Zero(t, errno, "ioprio_get")
		assert.Equal(t, IOPrioIdle>>ioprioClassShift, int(prio)>>ioprioClassShift, "I/O class of thread %d: %#x", tid, prio)
	}

	t.Cleanup(func() {
		require.NoError(t, fsys.Close())
		_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		assert.True(t, os.IsNotExist(err) || !slices.Equal(cmdline(pid), argv), "the server exits when drover closes it")
	})
	return pid
}

// findProcess is the pid of the one process running argv.
func findProcess(t *testing.T, argv []string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && slices.Equal(cmdline(pid), argv) {
			found = append(found, pid)
		}
	}
	require.Len(t, found, 1, "processes running %q", argv)
	return found[0]
}

// niceOf reads a thread's nice value, field 19 of /proc/PID/task/TID/stat.
func niceOf(t *testing.T, pid, tid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat"))
	require.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	n, err := strconv.Atoi(f[19-3])
	require.NoError(t, err)
	return n
}
