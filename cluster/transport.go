package cluster

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"syscall"
	"time"
)

// Transport is an open connection to one host. Both the SSH transport and the
// local transport implement it, and both pass the same conformance suite
// (transporttest), so the launcher never knows which one it drives.
//
// A Transport is safe for concurrent use: many commands and file operations
// run over one connection at once.
type Transport interface {
	// Host is the host this transport reaches, as it was when dialled.
	Host() Endpoint
	// Start starts cmd on the host and returns at once. Cancelling ctx
	// closes the command's channel (SSH) or kills it (local); it does not
	// wait for the process to exit. A caller that must not leave the
	// command running on the host signals it (Process.Signal) first.
	Start(ctx context.Context, cmd Cmd) (Process, error)
	// FS gives file access on the host (SFTP over SSH, the os package
	// locally). The FS shares the transport's connection.
	FS(ctx context.Context) (FS, error)
	// Close releases the connection. Commands still running lose their
	// channel; drover's agent reacts to that by stopping its process group.
	Close() error
}

// Cmd is a command to run on a host: either Args, a program and its
// arguments, or Shell, a command line. Args are never interpreted by a
// shell as code: the SSH transport quotes every argument and env value for
// a POSIX shell, the local transport uses exec directly.
type Cmd struct {
	Args []string
	// Shell, when set instead of Args, is a command line for the host's
	// shell (`drover exec job.toml -- 'nvidia-smi | grep MiB'`): the login
	// shell over SSH, as `ssh host LINE` runs it, and /bin/sh locally. It
	// is the user's own code, run as they typed it; drover never builds a
	// Shell line from data.
	Shell string
	// Env is added to the login environment of the host.
	Env map[string]string
	// Dir is the working directory; relative paths are under the login
	// user's home; "" means the home directory.
	Dir    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// name is how errors name the command: its program, or its shell line cut
// short.
func (c Cmd) name() string {
	if c.Shell == "" {
		if len(c.Args) == 0 {
			return "(empty command)"
		}
		return c.Args[0]
	}
	line := c.Shell
	if len(line) > 40 {
		line = line[:37] + "..."
	}
	return fmt.Sprintf("%q", line)
}

// Process is a started command.
type Process interface {
	// Signal sends sig to the command's process group: the command and
	// everything it started that did not move to a group of its own.
	// Closing an SSH channel does not stop the command behind it (without
	// a terminal sshd just lets it run), so this is how a caller that
	// gives up on a command keeps the promise that nothing is left running
	// on the host. Over SSH it is an RFC 4254 "signal" request, which
	// OpenSSH delivers with killpg; a server that does not support it
	// ignores it, and no error says so. Signal after the command exited
	// does nothing.
	Signal(sig syscall.Signal) error
	// Wait waits for the command to finish and for its output to be
	// copied. It returns nil on exit status 0, an *ExitError when the
	// command exited non-zero or by a signal, and another error when the
	// connection was lost (see IsConnectionLost).
	Wait() error
}

// ExitError reports a command that ran and failed.
type ExitError struct {
	Host string
	// Code is the exit status; for a signal it is 128+signal number, as a
	// shell reports it.
	Code int
	// Signal is the signal name without "SIG" ("KILL") when the process was
	// killed by a signal, else "".
	Signal string
}

func (e *ExitError) Error() string {
	if e.Signal != "" {
		return fmt.Sprintf("%s: exited %d (SIG%s)", e.Host, e.Code, e.Signal)
	}
	return fmt.Sprintf("%s: exited %d", e.Host, e.Code)
}

// FS is the file access push, probe and checkpoint discovery need. Paths are
// host paths; relative ones are under the login user's home. It follows the
// os package's conventions: errors satisfy errors.Is(err, fs.ErrNotExist)
// where os would.
type FS interface {
	Stat(path string) (fs.FileInfo, error)
	Lstat(path string) (fs.FileInfo, error)
	ReadDir(path string) ([]fs.FileInfo, error)
	MkdirAll(path string, perm fs.FileMode) error
	// Mkdir creates one directory, failing if path exists or its parent
	// does not: an atomic "create unless there", for state directories.
	// SFTP servers report both failures alike, so callers that must tell
	// them apart stat afterwards.
	Mkdir(path string, perm fs.FileMode) error
	// Create creates or truncates path for writing.
	Create(path string) (io.WriteCloser, error)
	Open(path string) (io.ReadCloser, error)
	// Rename replaces newpath atomically if it exists (POSIX rename).
	Rename(oldpath, newpath string) error
	Remove(path string) error
	RemoveAll(path string) error
	Chmod(path string, mode fs.FileMode) error
	Chtimes(path string, atime, mtime time.Time) error
	// Symlink creates newname as a symbolic link holding target, as given
	// (not resolved); it fails if newname exists. Creating a link is
	// atomic and reading one back (Readlink) is a single request, which
	// makes a link the cheapest way to keep a short value on a host:
	// push keeps its manifest's sum in one.
	Symlink(target, newname string) error
	// Readlink returns the target of the symbolic link at path.
	Readlink(path string) (string, error)
	// Home is the absolute path of the login user's home directory.
	Home() (string, error)
}

// CheckCmd reports a command no transport may run: both Args and Shell,
// neither, or an environment variable name that is not an identifier.
// Transports outside this package (slurm) check with it as SSH and local do.
func CheckCmd(cmd Cmd) error { return checkCmd(cmd) }

// Pinger is a Transport that can tell, in one round trip, whether its
// connection still answers. A caller that keeps a connection across long
// gaps (`drover run` keeps its connections from one attempt to the next)
// pings before reusing it, rather than finding a dead link in the middle of
// its next operation.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Ping checks that t's connection still answers; transports that cannot
// tell (the local one, whose "connection" cannot die) are taken to be
// alive. A connection that does not answer before ctx ends is closed and
// reported lost (IsConnectionLost).
func Ping(ctx context.Context, t Transport) error {
	if p, ok := t.(Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}
