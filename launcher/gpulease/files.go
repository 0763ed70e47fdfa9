package gpulease

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultDir is where leases live on a host: under /tmp, which every
// Linux has, sticky and world-writable, for every user.
const DefaultDir = "/tmp/drover-gpus"

// maxFile bounds what is read of a lease or queue file: another user
// writes them.
const maxFile = 4096

const (
	leaseSuffix = ".lease"
	waitSuffix  = ".wait"
)

// Prepare makes sure dir is a shared lease directory: a real directory
// (not a link), world-writable and sticky, so that every user can lease
// and no non-root user can remove another's lease. It creates it when
// missing and fixes the mode of one the caller owns.
func Prepare(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create the GPU lease directory %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
		if err == nil && fi.Mode().IsDir() && owner(fi) == os.Getuid() {
			err = os.Chmod(dir, 0o777|fs.ModeSticky) // Mkdir's mode passes the umask
			if err == nil {
				fi, err = os.Lstat(dir)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("GPU lease directory %s: %w", dir, err)
	}
	if !fi.Mode().IsDir() {
		return fmt.Errorf("GPU lease directory %s is a %s, not a directory: remove it (as root if it is not yours)", dir, kind(fi.Mode()))
	}
	if fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm()&0o003 != 0o003 {
		if owner(fi) == os.Getuid() {
			if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
				return fmt.Errorf("make GPU lease directory %s sticky: %w", dir, err)
			}
			return nil
		}
		return fmt.Errorf("GPU lease directory %s has mode %s, not drwxrwxrwt: its owner (uid %d) must `chmod 1777 %s`", dir, fi.Mode(), owner(fi), dir)
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// held is a file this process created and locks: the lock is the lease.
type held struct {
	path string
	f    *os.File
}

// release removes the file, then lets the lock go; a file that others
// still hold (the agents of a detached group that outlives its
// supervisor, see Join) is left to them: it dies with the last of them.
func (h *held) release() {
	if h == nil || h.f == nil {
		return
	}
	if syscall.Flock(int(h.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		if now, err := os.Lstat(h.path); err == nil {
			if fi, err := h.f.Stat(); err == nil && os.SameFile(now, fi) {
				os.Remove(h.path)
			}
		}
	}
	h.f.Close() // closing drops the flock
	h.f = nil
}

// create writes v as the file name in dir, whole and locked: under a
// temporary name (O_EXCL, O_NOFOLLOW), locked, written, then linked to
// name (link(2) fails on any existing name, a planted link included).
// An existing name is fs.ErrExist.
func create(dir, name string, v any) (*held, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var rnd [8]byte
	randRead(rnd[:])
	tmp := filepath.Join(dir, ".tmp."+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	if err := f.Chmod(0o644); err != nil { // the umask may have taken read away
		f.Close()
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", tmp, err)
	}
	path := filepath.Join(dir, name)
	if err := os.Link(tmp, path); err != nil {
		f.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fs.ErrExist
		}
		return nil, fmt.Errorf("link %s: %w", path, err)
	}
	return &held{path: path, f: f}, nil
}

// entry is one lease or queue file as List reads it.
type entry struct {
	name  string
	uid   int
	alive bool
	data  []byte
	// foreign is what the file is when it is not a regular file.
	foreign string
}

// read opens name in dir without following links and tests its lock: a
// lock held is a live holder, whose record it reads. A dead file of the
// caller's own is removed (under the lock, after checking that the name
// still is that file).
func read(dir, name string) (entry, bool) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return entry{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return entry{}, false
	}
	e := entry{name: name, uid: owner(fi)}
	// Holders keep shared locks (the gpu-lease agent and the group's
	// agents, Join): an exclusive one is granted only when none is left.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		e.alive = true
		e.data, _ = io.ReadAll(io.LimitReader(f, maxFile))
		return e, true
	}
	if e.uid == os.Getuid() {
		if now, err := os.Lstat(path); err == nil && os.SameFile(now, fi) {
			os.Remove(path) // our own dead lease: reclaimed, under the lock
		}
	}
	return e, true
}

// list reads every file in dir with suffix.
func list(dir, suffix string) ([]entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list GPU leases in %s: %w", dir, err)
	}
	var out []entry
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), suffix) {
			continue
		}
		if !de.Type().IsRegular() {
			// Not drover's: a link or anything else planted under a
			// lease's name holds that name (and is never followed).
			fi, err := os.Lstat(filepath.Join(dir, de.Name()))
			if err == nil {
				out = append(out, entry{name: de.Name(), uid: owner(fi), alive: true, foreign: kind(fi.Mode())})
			}
			continue
		}
		if e, ok := read(dir, de.Name()); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// List returns the live leases in dir, by GPU key. Dead leases of the
// caller's user are removed on the way.
func List(dir string) (map[string]Holder, error) {
	es, err := list(dir, leaseSuffix)
	if err != nil {
		return nil, err
	}
	out := map[string]Holder{}
	for _, e := range es {
		if !e.alive {
			continue
		}
		var h Holder
		if e.foreign != "" {
			h = Holder{Job: "(none: " + e.name + " is a " + e.foreign + ", not drover's lease; its owner or root must remove it)"}
		} else if json.Unmarshal(bytes.TrimSpace(e.data), &h) != nil {
			h = Holder{Job: "(unreadable lease " + e.name + ")"}
		}
		h.Key = strings.SplitN(e.name, ".", 2)[0] // the file's name and owner, whatever it says
		h.UID = e.uid
		out[h.Key] = h
	}
	return out, nil
}

// leaseName is the file of user uid's lease on the GPU key.
func leaseName(key string, uid int) string {
	return key + "." + strconv.Itoa(uid) + leaseSuffix
}

func randRead(b []byte) { rand.Read(b) }

// Join holds the lease file path too, with a shared lock, for as long as
// the returned file stays open: the agents of a group (`agent run
// --gpu-lease`) hold their GPUs' leases beside the gpu-lease agent, so
// that a lease lives as long as the group does (a detached group whose
// supervisor is gone included). A lease that is gone, or is not a
// regular file, is an error.
func Join(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("hold GPU lease %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("a %s, not a lease", kind(fi.Mode()))
	}
	if err == nil {
		// Blocking: a look at the lease (List) holds it exclusively for
		// a moment.
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
	}
	if err == nil {
		if now, lerr := os.Lstat(path); lerr != nil || !os.SameFile(now, fi) {
			err = errors.New("it was given back meanwhile")
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hold GPU lease %s: %w", path, err)
	}
	return f, nil
}
