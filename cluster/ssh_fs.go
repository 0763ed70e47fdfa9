package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/pkg/sftp"
)

// sftpFS is FS over the transport's SFTP client. Relative paths are
// relative to the login home, and errors are *fs.PathError wrapping
// fs.ErrNotExist / fs.ErrPermission like the os package's, so callers test
// them with errors.Is either way.
type sftpFS struct {
	c *sftp.Client
	t Transport // runs ExtractTar's tar on the same host

	homeOnce sync.Once
	home     string
	homeErr  error
}

// NewSFTPFS is FS over c, an SFTP client whose server runs on t's host,
// for transports other than SSH that reach a host's files through an
// sftp-server they start there (slurm: one in a job step on a node that
// does not share this machine's filesystem). ExtractTar runs the host's tar
// with t.Start. The caller closes c.
func NewSFTPFS(c *sftp.Client, t Transport) FS { return &sftpFS{c: c, t: t} }

// abs cleans p. A relative path is sent as it is: sftp-server resolves it
// against its working directory, which is the login home (or the start
// directory an admin gave it with -d, which is also what asking for the
// home would answer), so asking first cost a round trip per connection.
func (f *sftpFS) abs(p string) string {
	return path.Clean(p)
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	var se *sftp.StatusError
	if errors.As(err, &se) {
		switch se.FxCode() {
		case sftp.ErrSSHFxNoSuchFile:
			err = fs.ErrNotExist
		case sftp.ErrSSHFxPermissionDenied:
			err = fs.ErrPermission
		}
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

func (f *sftpFS) Stat(p string) (fs.FileInfo, error) {
	fi, err := f.c.Stat(f.abs(p))
	return fi, pathErr("stat", p, err)
}

func (f *sftpFS) Lstat(p string) (fs.FileInfo, error) {
	fi, err := f.c.Lstat(f.abs(p))
	return fi, pathErr("lstat", p, err)
}

// ReadDir lists p sorted by name, as os.ReadDir does.
func (f *sftpFS) ReadDir(p string) ([]fs.FileInfo, error) {
	fis, err := f.c.ReadDir(f.abs(p))
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	sort.Slice(fis, func(i, j int) bool { return fis[i].Name() < fis[j].Name() })
	return fis, nil
}

// MkdirAll creates p and its parents; perm applies to the directories it
// creates (before the host's umask), as with os.MkdirAll.
//
// It tries the mkdir first: the usual case, a new directory in an
// existing one, then costs one round trip, not three (stat, stat of the
// parent, mkdir).
func (f *sftpFS) Mkdir(p string, perm fs.FileMode) error {
	ap := f.abs(p)
	if err := f.c.Mkdir(ap); err != nil {
		return pathErr("mkdir", p, err)
	}
	if perm != 0 && perm.Perm() != 0o755 {
		return pathErr("chmod", p, f.c.Chmod(ap, perm.Perm()))
	}
	return nil
}

// MkdirAll sends the mkdir and a stat of the same path at once: the usual
// cases (the directory is new, or already there) then cost one round trip,
// not two; only each missing parent adds one.
func (f *sftpFS) MkdirAll(p string, perm fs.FileMode) error {
	ap := f.abs(p)
	type statResult struct {
		fi  fs.FileInfo
		err error
	}
	stat := make(chan statResult, 1)
	go func() {
		fi, err := f.c.Stat(ap)
		stat <- statResult{fi, err}
	}()
	err := f.c.Mkdir(ap)
	st := <-stat
	if err != nil {
		fi, serr := st.fi, st.err
		if serr == nil {
			if fi.IsDir() {
				return nil
			}
			return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("not a directory")}
		}
		parent := path.Dir(ap)
		if parent == ap || parent == "." {
			return pathErr("mkdir", p, err)
		}
		if err := f.MkdirAll(parent, perm); err != nil {
			return err
		}
		err = f.c.Mkdir(ap)
	}
	if err != nil {
		// Lost a race with another creator: fine if it is a directory now.
		if fi, serr := f.c.Stat(ap); serr == nil && fi.IsDir() {
			return nil
		}
		return pathErr("mkdir", p, err)
	}
	if perm != 0 && perm.Perm() != 0o755 {
		return pathErr("chmod", p, f.c.Chmod(ap, perm.Perm()))
	}
	return nil
}

// Symlink creates newname as a link to target, stored as given.
func (f *sftpFS) Symlink(target, newname string) error {
	return pathErr("symlink", newname, f.c.Symlink(target, f.abs(newname)))
}

// Readlink returns the target of the link at p, as stored.
func (f *sftpFS) Readlink(p string) (string, error) {
	t, err := f.c.ReadLink(f.abs(p))
	return t, pathErr("readlink", p, err)
}

// Create returns the *sftp.File, whose ReadFrom pipelines writes (io.Copy
// uses it), so large files stream at link speed.
func (f *sftpFS) Create(p string) (io.WriteCloser, error) {
	fl, err := f.c.OpenFile(f.abs(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	return fl, nil
}

// Open returns the *sftp.File, whose WriteTo pipelines reads.
func (f *sftpFS) Open(p string) (io.ReadCloser, error) {
	fl, err := f.c.Open(f.abs(p))
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	return fl, nil
}

// Rename uses posix-rename@openssh.com, which replaces newpath atomically;
// plain SFTP rename refuses an existing target.
func (f *sftpFS) Rename(oldpath, newpath string) error {
	if _, ok := f.c.HasExtension("posix-rename@openssh.com"); ok {
		return pathErr("rename", oldpath, f.c.PosixRename(f.abs(oldpath), f.abs(newpath)))
	}
	err := f.c.Rename(f.abs(oldpath), f.abs(newpath))
	if err != nil {
		if _, serr := f.c.Lstat(f.abs(newpath)); serr == nil {
			if rerr := f.c.Remove(f.abs(newpath)); rerr == nil {
				err = f.c.Rename(f.abs(oldpath), f.abs(newpath))
			}
		}
	}
	return pathErr("rename", oldpath, err)
}

// Remove removes a file or an empty directory. pkg/sftp sends a REMOVE
// and, when that fails, an RMDIR: a directory or a missing path costs two
// round trips. Callers that know p is a directory use RemoveDir.
func (f *sftpFS) Remove(p string) error {
	return pathErr("remove", p, f.c.Remove(f.abs(p)))
}

// RemoveDir removes the empty directory p with one request (an RMDIR);
// it fails on a file.
func (f *sftpFS) RemoveDir(p string) error {
	return pathErr("rmdir", p, f.c.RemoveDirectory(f.abs(p)))
}

// hostName names the host in errors.
func (f *sftpFS) hostName() string {
	if f.t == nil {
		return "the sftp server"
	}
	return f.t.Host().Name
}

// RemoveAll removes p and everything below it; a missing p is not an error,
// as with os.RemoveAll. Names the server lists are checked (CheckName)
// before they become paths.
func (f *sftpFS) RemoveAll(p string) error {
	ap := f.abs(p)
	fi, err := f.c.Lstat(ap)
	if err != nil {
		if errors.Is(pathErr("lstat", p, err), fs.ErrNotExist) {
			return nil
		}
		return pathErr("removeall", p, err)
	}
	if fi.IsDir() {
		entries, err := f.c.ReadDir(ap)
		if err != nil {
			return pathErr("removeall", p, err)
		}
		for _, e := range entries {
			// A listed "." or ".." (an empty name reaches us as ".")
			// would make this recurse forever, or remove the parent.
			if err := CheckName(f.hostName(), ap, e.Name()); err != nil {
				return pathErr("removeall", p, err)
			}
			if err := f.RemoveAll(path.Join(ap, e.Name())); err != nil {
				return err
			}
		}
		return pathErr("removeall", p, f.c.RemoveDirectory(ap))
	}
	err = f.c.Remove(ap)
	if errors.Is(pathErr("remove", p, err), fs.ErrNotExist) {
		return nil
	}
	return pathErr("removeall", p, err)
}

func (f *sftpFS) Chmod(p string, mode fs.FileMode) error {
	return pathErr("chmod", p, f.c.Chmod(f.abs(p), mode))
}

func (f *sftpFS) Chtimes(p string, atime, mtime time.Time) error {
	return pathErr("chtimes", p, f.c.Chtimes(f.abs(p), atime, mtime))
}

// Home asks the server for its working directory once, when first needed.
func (f *sftpFS) Home() (string, error) {
	f.homeOnce.Do(func() {
		f.home, f.homeErr = f.c.Getwd()
		if f.homeErr != nil {
			f.homeErr = fmt.Errorf("ask sftp-server for its working directory: %w", f.homeErr)
		}
	})
	return f.home, f.homeErr
}
