package cluster

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// NewRootFS returns an FS on this machine confined to dir with os.Root:
// no path given to it, nor any symbolic link met on the way, reaches
// outside dir. Drover writes what hosts send (checkpoint copies in the
// mirror) through it, so that a name a host made up can at worst fail,
// never write beside the job file. Paths are absolute under dir or
// relative to it; dir itself is created on the first MkdirAll.
func NewRootFS(dir string) FS { return rootFS{dir: filepath.Clean(dir)} }

type rootFS struct{ dir string }

// rel turns p into a path relative to the root, refusing one outside it.
func (r rootFS) rel(op, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	rel, err := filepath.Rel(r.dir, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("outside %s, the only directory drover writes here", r.dir)}
	}
	return rel, nil
}

// with opens the root for one operation on p: an FS has no Close, and an
// open directory per operation costs one system call.
func (r rootFS) with(op, p string, f func(root *os.Root, rel string) error) error {
	rel, err := r.rel(op, p)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return f(root, rel)
}

func (r rootFS) Stat(p string) (fi fs.FileInfo, err error) {
	err = r.with("stat", p, func(root *os.Root, rel string) error { fi, err = root.Stat(rel); return err })
	return fi, err
}

func (r rootFS) Lstat(p string) (fi fs.FileInfo, err error) {
	err = r.with("lstat", p, func(root *os.Root, rel string) error { fi, err = root.Lstat(rel); return err })
	return fi, err
}

func (r rootFS) ReadDir(p string) (infos []fs.FileInfo, err error) {
	err = r.with("readdir", p, func(root *os.Root, rel string) error {
		f, err := root.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		entries, err := f.ReadDir(-1)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				infos = append(infos, info)
			}
		}
		return nil
	})
	return infos, err
}

func (r rootFS) MkdirAll(p string, perm fs.FileMode) error {
	if err := os.MkdirAll(r.dir, perm); err != nil {
		return err
	}
	return r.with("mkdir", p, func(root *os.Root, rel string) error { return root.MkdirAll(rel, perm) })
}

func (r rootFS) Mkdir(p string, perm fs.FileMode) error {
	return r.with("mkdir", p, func(root *os.Root, rel string) error { return root.Mkdir(rel, perm) })
}

func (r rootFS) Create(p string) (w io.WriteCloser, err error) {
	err = r.with("create", p, func(root *os.Root, rel string) error { w, err = root.Create(rel); return err })
	return w, err
}

func (r rootFS) Open(p string) (rc io.ReadCloser, err error) {
	err = r.with("open", p, func(root *os.Root, rel string) error { rc, err = root.Open(rel); return err })
	return rc, err
}

func (r rootFS) Rename(oldpath, newpath string) error {
	newRel, err := r.rel("rename", newpath)
	if err != nil {
		return err
	}
	return r.with("rename", oldpath, func(root *os.Root, rel string) error { return root.Rename(rel, newRel) })
}

func (r rootFS) Remove(p string) error {
	return r.with("remove", p, func(root *os.Root, rel string) error { return root.Remove(rel) })
}

func (r rootFS) RemoveAll(p string) error {
	err := r.with("removeall", p, func(root *os.Root, rel string) error { return root.RemoveAll(rel) })
	if os.IsNotExist(err) {
		return nil // the root itself is not there yet
	}
	return err
}

func (r rootFS) Chmod(p string, mode fs.FileMode) error {
	return r.with("chmod", p, func(root *os.Root, rel string) error { return root.Chmod(rel, mode) })
}

func (r rootFS) Chtimes(p string, atime, mtime time.Time) error {
	return r.with("chtimes", p, func(root *os.Root, rel string) error { return root.Chtimes(rel, atime, mtime) })
}

func (r rootFS) Symlink(target, newname string) error {
	return r.with("symlink", newname, func(root *os.Root, rel string) error { return root.Symlink(target, rel) })
}

func (r rootFS) Readlink(p string) (s string, err error) {
	err = r.with("readlink", p, func(root *os.Root, rel string) error { s, err = root.Readlink(rel); return err })
	return s, err
}

// Home is the root: relative paths are under it.
func (r rootFS) Home() (string, error) { return r.dir, nil }
