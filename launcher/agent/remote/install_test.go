package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
)

func install(t *testing.T, tr cluster.Transport, agents Agents) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Install(ctx, tr, agents)
}

// An agent is uploaded once, under its content's name, executable, with no
// temporary file left; a second install finds it and uploads nothing.
func TestFleetInstall(t *testing.T) {
	ts := dialFleet(t)
	tr := ts[0]
	remote, err := install(t, tr, selfAgents(t))
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^/home/drovertest/\.drover/bin/drover-[0-9a-f]{12}$`), remote)
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	fi, err := fsys.Stat(remote)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

	// Mark the upload: a second install must leave the file alone.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, fsys.Chtimes(remote, old, old))
	again, err := install(t, tr, selfAgents(t))
	require.NoError(t, err)
	assert.Equal(t, remote, again)
	fi, err = fsys.Stat(remote)
	require.NoError(t, err)
	assert.True(t, fi.ModTime().Equal(old), "second install re-uploaded (mtime %v)", fi.ModTime())
	assertOnlyAgents(t, fsys, path.Dir(remote))
}

// A file under the agent's name that answers another version (here: a
// script of the same size) is replaced by the real agent.
func TestFleetInstallReplacesOtherVersion(t *testing.T) {
	ts := dialFleet(t)
	tr := ts[1]
	agents := selfAgents(t)
	remote, err := install(t, tr, agents)
	require.NoError(t, err)
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	fi, err := fsys.Stat(remote)
	require.NoError(t, err)

	script := []byte("#!/bin/sh\necho drover v0.0.1 linux/amd64\n")
	fake := append(script, make([]byte, fi.Size()-int64(len(script)))...)
	w, err := fsys.Create(remote)
	require.NoError(t, err)
	_, err = w.Write(fake)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	again, err := install(t, tr, agents)
	require.NoError(t, err)
	assert.Equal(t, remote, again)
	out, err := output(context.Background(), tr, remote, "agent", "version")
	require.NoError(t, err)
	want, err := agentVersion(agents)
	require.NoError(t, err)
	assert.Equal(t, want+"\n", string(out))
	assertOnlyAgents(t, fsys, path.Dir(remote))
}

func TestInstallLocal(t *testing.T) {
	tr, err := cluster.Dial(context.Background(), cluster.Endpoint{Name: "me", Address: "local", Transport: cluster.TransportLocal}, cluster.DialOptions{})
	require.NoError(t, err)
	defer tr.Close()
	agents := selfAgents(t)
	got, err := Install(context.Background(), tr, agents)
	require.NoError(t, err)
	assert.Equal(t, agents.Self, got)
}

// assertOnlyAgents fails when dir holds anything but installed agents
// (a temporary upload left behind).
func assertOnlyAgents(t *testing.T, fsys cluster.FS, dir string) {
	t.Helper()
	entries, err := fsys.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.Regexp(t, `^drover-[0-9a-f]{12}$`, e.Name(), "left in %s", dir)
	}
}

// agentVersion is what the test binary, as agent, answers.
func agentVersion(a Agents) (string, error) {
	b, err := a.For("me", Platform(runtime.GOOS+"/"+runtime.GOARCH))
	if err != nil {
		return "", err
	}
	return agent.FileVersion(b.Path)
}

// The agent goes over a command's stdin (not the SFTP session, which the
// lease and the push share): what arrives is the local file byte for byte.
// A host that cannot write it (the agent directory read-only) fails the
// upload, named as such and not as an agent that does not run, and leaves
// nothing behind. The state command creates the directories it is given.
func TestFleetInstallUploadOverCommand(t *testing.T) {
	ts := dialFleet(t)
	tr := ts[1]
	agents := selfAgents(t)
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	home, err := fsys.Home()
	require.NoError(t, err)
	dir := path.Join(home, agentDir)
	require.NoError(t, fsys.RemoveAll(dir))
	require.NoError(t, fsys.MkdirAll(dir, 0o755))
	require.NoError(t, fsys.Chmod(dir, 0o555))
	_, err = install(t, tr, agents)
	require.NoError(t, fsys.Chmod(dir, 0o755))
	require.Error(t, err)
	var cre *CannotRunError
	assert.False(t, errors.As(err, &cre), "a failed write is not an agent that does not run: %v", err)
	assert.Contains(t, err.Error(), "upload to "+dir)
	assertOnlyAgents(t, fsys, dir)

	// The state command creates the directories it is given (a run's
	// workdir state directory), missing parents included.
	require.NoError(t, fsys.RemoveAll(path.Join(home, "fresh-wd")))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	remote, err := Install(ctx, tr, agents, "fresh-wd/.drover")
	require.NoError(t, err)
	fi, err := fsys.Lstat(path.Join(home, "fresh-wd/.drover"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "fresh-wd/.drover is a %v", fi.Mode())
	require.NoError(t, fsys.RemoveAll(path.Join(home, "fresh-wd")))
	b, err := agents.For("me", Platform(runtime.GOOS+"/"+runtime.GOARCH))
	require.NoError(t, err)
	want, err := os.ReadFile(b.Path)
	require.NoError(t, err)
	r, err := fsys.Open(remote)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, r.Close())
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the installed agent differs from the local one (%d bytes, want %d)", len(got), len(want))
	assertOnlyAgents(t, fsys, dir)
}

// The install says, before its upload, the home (as SFTP's realpath says
// it) and which of the directories it was given it created: a run's first
// push into a workdir the install made has nothing to compare.
func TestFleetInstallTells(t *testing.T) {
	ts := dialFleet(t)
	tr := ts[1]
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	home, err := fsys.Home()
	require.NoError(t, err)
	require.NoError(t, fsys.RemoveAll(path.Join(home, "told-wd")))
	require.NoError(t, fsys.MkdirAll(path.Join(home, "old-wd"), 0o755))
	defer fsys.RemoveAll(path.Join(home, "told-wd"))
	defer fsys.RemoveAll(path.Join(home, "old-wd"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var toldHome string
	var toldMade []string
	dirs := []string{"told-wd", "told-wd/.drover", "old-wd", "old-wd/.drover"}
	in, err := InstallWith(ctx, tr, selfAgents(t), InstallOptions{Dirs: dirs, Told: func(h string, made []string) {
		toldHome, toldMade = h, made
	}})
	require.NoError(t, err)
	assert.Equal(t, home, toldHome)
	want := []string{"told-wd", "told-wd/.drover", "old-wd/.drover"}
	assert.Equal(t, want, toldMade)
	assert.Equal(t, want, in.Made)
	assert.Equal(t, path.Join(home, agentDir), path.Dir(in.Path))
	for _, d := range dirs {
		fi, err := fsys.Stat(path.Join(home, d))
		require.NoError(t, err)
		assert.True(t, fi.IsDir(), d)
	}
}

// Nothing of an upload stays behind for good, and old agents go (issue 30
// item 10): an upload cut mid-way leaves no temporary file (removed by
// the script when its session ends, else by a later install once it is
// an hour old); an install removes the agents no install used for 30
// days, and keeps the others (another drover version using the host).
func TestFleetInstallCleansUp(t *testing.T) {
	ts := dialFleet(t)
	tr := ts[len(ts)-1]
	agents := selfAgents(t)
	remote, err := install(t, tr, agents)
	require.NoError(t, err)
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	dir := path.Dir(remote)
	put := func(name string, age time.Duration) string {
		p := path.Join(dir, name)
		w, err := fsys.Create(p)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		at := time.Now().Add(-age)
		require.NoError(t, fsys.Chtimes(p, at, at))
		return p
	}
	exists := func(p string) bool {
		_, err := fsys.Lstat(p)
		return err == nil
	}
	staleTmp := put(".drover-aaaaaaaaaaaa.tmp-bbbbbbbbbbbb", 2*time.Hour)
	liveTmp := put(".drover-aaaaaaaaaaaa.tmp-cccccccccccc", 0)
	unused := put("drover-0123456789ab", 40*24*time.Hour)
	used := put("drover-ba9876543210", 24*time.Hour)
	old := time.Now().Add(-40 * 24 * time.Hour)
	require.NoError(t, fsys.Chtimes(remote, old, old), "the agent in use is marked used at every install")

	_, err = install(t, tr, agents)
	require.NoError(t, err)
	assert.False(t, exists(staleTmp), "an upload's file over an hour old is removed")
	assert.True(t, exists(liveTmp), "an upload under way is left alone")
	assert.False(t, exists(unused), "an agent unused for 30 days is pruned")
	assert.True(t, exists(used), "another version's agent used lately stays")
	assert.True(t, exists(remote), "the agent in use stays")
	require.NoError(t, fsys.Remove(liveTmp))
	require.NoError(t, fsys.Remove(used))

	// An upload cut mid-way: the agent comes from a pipe that stops
	// after 1 MiB, and the install is cancelled.
	require.NoError(t, fsys.Remove(remote))
	fifo := path.Join(t.TempDir(), "agent")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	b, err := agents.For("me", Platform(runtime.GOOS+"/"+runtime.GOARCH))
	require.NoError(t, err)
	b.Path = fifo
	cut := Agents{Self: agents.Self, Carried: map[Platform]Binary{Platform(runtime.GOOS + "/" + runtime.GOARCH): b}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		_, _ = w.Write(make([]byte, 1<<20))
		cancel()
		<-time.After(30 * time.Second) // keep the pipe open: the upload is cut, not ended
	}()
	_, err = Install(ctx, tr, cut)
	require.Error(t, err)
	testenv.WaitFor(t, 10*time.Second, "the cut upload's file to be removed", func() bool {
		entries, err := fsys.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp-") {
				return false
			}
		}
		return true
	})
	assertOnlyAgents(t, fsys, dir)
}
