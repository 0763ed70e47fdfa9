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
	"github.com/droverhq/drover/cluster/config"
)

// TestSFTPLowPriority: `drover agent sftp --low-priority`, opened as
// drover opens it for checkpoint copies (cluster.OpenCommandFS), serves
// files, and every thread of it runs at nice 19 in the idle I/O class.
func TestSFTPLowPriority(t *testing.T) {
	bin := droverBinary(t)
	tr, err := cluster.NewLocal(config.Host{Name: "here", Transport: config.TransportLocal})
	require.NoError(t, err)
	ctx := context.Background()
	argv := SFTPCommand(bin)
	fsys, err := cluster.OpenCommandFS(ctx, tr, argv)
	require.NoError(t, err)
	defer fsys.Close()

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

	require.NoError(t, fsys.Close())
	_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	assert.True(t, os.IsNotExist(err) || !slices.Equal(cmdline(pid), argv), "the server exits when drover closes it")
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
