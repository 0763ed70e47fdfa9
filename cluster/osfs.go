package cluster

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// NewOSFS returns an FS backed by the os package, with relative paths
// resolved under home. The local transport returns it, and tests use it to
// exercise push and checkpoint discovery against a temporary directory
// without any SSH in between, so both transports share one FS contract.
func NewOSFS(home string) FS {
	return osFS{home: home}
}

type osFS struct{ home string }

// abs resolves a host path the way the SSH transport does: relative paths
// are under the login user's home.
func (o osFS) abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(o.home, path)
}

func (o osFS) Stat(path string) (fs.FileInfo, error)  { return os.Stat(o.abs(path)) }
func (o osFS) Lstat(path string) (fs.FileInfo, error) { return os.Lstat(o.abs(path)) }

func (o osFS) ReadDir(path string) ([]fs.FileInfo, error) {
	entries, err := os.ReadDir(o.abs(path))
	if err != nil {
		return nil, err
	}
	infos := make([]fs.FileInfo, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			// Removed between the listing and the stat: it is gone,
			// as SFTP's readdir would not have listed it.
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func (o osFS) MkdirAll(path string, perm fs.FileMode) error {
	return os.MkdirAll(o.abs(path), perm)
}

func (o osFS) Mkdir(path string, perm fs.FileMode) error { return os.Mkdir(o.abs(path), perm) }

func (o osFS) Create(path string) (io.WriteCloser, error) { return os.Create(o.abs(path)) }
func (o osFS) Open(path string) (io.ReadCloser, error)    { return os.Open(o.abs(path)) }

func (o osFS) Rename(oldpath, newpath string) error {
	return os.Rename(o.abs(oldpath), o.abs(newpath))
}

func (o osFS) Remove(path string) error    { return os.Remove(o.abs(path)) }
func (o osFS) RemoveAll(path string) error { return os.RemoveAll(o.abs(path)) }

// RemoveDir removes the empty directory path, and fails on a file, as
// sftpFS's does (push removes its upload directory with it).
func (o osFS) RemoveDir(path string) error {
	if err := syscall.Rmdir(o.abs(path)); err != nil {
		return &fs.PathError{Op: "rmdir", Path: path, Err: err}
	}
	return nil
}

func (o osFS) Chmod(path string, mode fs.FileMode) error { return os.Chmod(o.abs(path), mode) }

func (o osFS) Chtimes(path string, atime, mtime time.Time) error {
	return os.Chtimes(o.abs(path), atime, mtime)
}

func (o osFS) Home() (string, error) { return o.home, nil }

func (o osFS) Symlink(target, newname string) error { return os.Symlink(target, o.abs(newname)) }
func (o osFS) Readlink(path string) (string, error) { return os.Readlink(o.abs(path)) }
