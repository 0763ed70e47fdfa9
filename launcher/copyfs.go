package launcher

import (
	"context"
	"io"
	"io/fs"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// lowPriorityFS is the file access checkpoint copies go through while an
// attempt trains: an SFTP session to `drover agent sftp --low-priority` on
// the host (agent.SFTPCommand), opened on the first copy, so that an
// attempt that never copies costs nothing. The agent runs at nice 19 and in
// the idle I/O class, which sshd's sftp-server (the transport's own FS)
// cannot be made to. When it cannot be started, copies fall back to the
// transport's FS and an event says so.
type lowPriorityFS struct {
	ctx    context.Context
	t      cluster.Transport
	agent  string
	plain  cluster.FS
	events func(format string, args ...any)

	mu     sync.Mutex
	fs     cluster.FS
	cmd    *cluster.CommandFS
	closed bool
}

func newLowPriorityFS(ctx context.Context, c *hostConn, events func(string, ...any)) *lowPriorityFS {
	return &lowPriorityFS{ctx: ctx, t: c.t, agent: c.agent, plain: c.fs, events: events}
}

func (l *lowPriorityFS) get() cluster.FS {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs != nil {
		return l.fs
	}
	if l.closed {
		return l.plain
	}
	cmd, err := remote.Client{T: l.t, Path: l.agent}.SFTP(l.ctx)
	if err != nil {
		l.events("%v; checkpoint copies on %s run at normal priority", err, l.t.Host().Name)
		l.fs = l.plain
		return l.fs
	}
	l.cmd, l.fs = cmd, cmd
	return l.fs
}

// Close ends the agent's SFTP server, if one was started.
func (l *lowPriorityFS) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.cmd == nil {
		return nil
	}
	return l.cmd.Close()
}

func (l *lowPriorityFS) Stat(p string) (fs.FileInfo, error)  { return l.get().Stat(p) }
func (l *lowPriorityFS) Lstat(p string) (fs.FileInfo, error) { return l.get().Lstat(p) }
func (l *lowPriorityFS) ReadDir(p string) ([]fs.FileInfo, error) {
	return l.get().ReadDir(p)
}
func (l *lowPriorityFS) MkdirAll(p string, perm fs.FileMode) error { return l.get().MkdirAll(p, perm) }
func (l *lowPriorityFS) Mkdir(p string, perm fs.FileMode) error    { return l.get().Mkdir(p, perm) }
func (l *lowPriorityFS) Create(p string) (io.WriteCloser, error)   { return l.get().Create(p) }
func (l *lowPriorityFS) Open(p string) (io.ReadCloser, error)      { return l.get().Open(p) }
func (l *lowPriorityFS) Rename(o, n string) error                  { return l.get().Rename(o, n) }
func (l *lowPriorityFS) Remove(p string) error                     { return l.get().Remove(p) }
func (l *lowPriorityFS) RemoveAll(p string) error                  { return l.get().RemoveAll(p) }
func (l *lowPriorityFS) Chmod(p string, m fs.FileMode) error       { return l.get().Chmod(p, m) }
func (l *lowPriorityFS) Chtimes(p string, a, m time.Time) error    { return l.get().Chtimes(p, a, m) }
func (l *lowPriorityFS) Symlink(t, n string) error                 { return l.get().Symlink(t, n) }
func (l *lowPriorityFS) Readlink(p string) (string, error)         { return l.get().Readlink(p) }
func (l *lowPriorityFS) Home() (string, error)                     { return l.get().Home() }
