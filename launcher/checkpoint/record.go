package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Kinds of Location.
const (
	// Written is the user's own entry in checkpoint_dir, as training wrote it.
	Written = "written"
	// Copy is drover's copy in <workdir>/.drover/checkpoints on a host.
	Copy = "copy"
	// Mirror is drover's copy in checkpoint_mirror on the controller.
	Mirror = "mirror"
)

// Location is one place a checkpoint is held.
type Location struct {
	Kind string `json:"kind"`
	// Host is the host's name; "" for the mirror.
	Host string `json:"host,omitempty"`
	// Path is absolute on Host (or on the controller for the mirror).
	Path string `json:"path"`
	// Stamp is the Found.Stamp of a Written entry: the version of the
	// user's file that this location holds.
	Stamp string `json:"stamp,omitempty"`
}

func (l Location) String() string {
	if l.Kind == Mirror {
		return "mirror:" + l.Path
	}
	return l.Host + ":" + l.Path
}

// Entry is one checkpoint in the record.
type Entry struct {
	// Seq is its place in the order drover saw checkpoints complete.
	Seq  int    `json:"seq"`
	Name string `json:"name"`
	// Size is the total bytes of its files, once drover has read them
	// (else the size the directory listing showed).
	Size int64 `json:"size"`
	// Seen is when drover saw it complete, on the controller's clock.
	Seen time.Time `json:"seen"`
	// Digest is the sha256 of its MANIFEST, once drover has read it.
	Digest string     `json:"digest,omitempty"`
	Held   []Location `json:"held"`
}

// Holds reports whether the entry lists a location of this kind on host.
func (e *Entry) holder(kind, host string) (Location, bool) {
	for _, l := range e.Held {
		if l.Kind == kind && l.Host == host {
			return l, true
		}
	}
	return Location{}, false
}

// Record is drover's persistent list of a job's checkpoints, in the order
// it saw them complete. It lives on the controller (RecordPath), is
// written through a temporary file on every change, and is safe for
// concurrent use.
type Record struct {
	path string
	// max is maxEntries; tests lower it.
	max  int
	mu   sync.Mutex
	data recordFile
}

type recordFile struct {
	Job     string   `json:"job"`
	Next    int      `json:"next"`
	Entries []*Entry `json:"checkpoints"`
}

// RecordPath is where a job's record lives: beside its run directories,
// so `drover checkpoints` finds it from the job file alone.
func RecordPath(logRoot, job string) string {
	return filepath.Join(logRoot, job+".checkpoints.json")
}

// LoadRecord reads the record at path; a missing file is an empty record.
func LoadRecord(path, job string) (*Record, error) {
	r := &Record{path: path, max: maxEntries, data: recordFile{Job: job, Next: 1}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint record: %w", err)
	}
	if err := json.Unmarshal(b, &r.data); err != nil {
		return nil, fmt.Errorf("read checkpoint record %s: %w (move it aside to start a new record)", path, err)
	}
	for _, e := range r.data.Entries {
		r.data.Next = max(r.data.Next, e.Seq+1)
	}
	return r, nil
}

// Entries returns a copy of the entries, oldest first.
func (r *Record) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, len(r.data.Entries))
	for i, e := range r.data.Entries {
		out[i] = *e
		out[i].Held = slices.Clone(e.Held)
	}
	return out
}

// update runs fn on the entries under the lock and saves when it reports a
// change.
func (r *Record) update(fn func(d *recordFile) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !fn(&r.data) {
		return nil
	}
	return r.saveLocked()
}

// maxEntries bounds the record of a long job that checkpoints often: past
// it, the oldest checkpoints that no place holds any more are forgotten.
const maxEntries = 1000

func (r *Record) saveLocked() error {
	for i := 0; len(r.data.Entries) > r.max && i < len(r.data.Entries); {
		if len(r.data.Entries[i].Held) == 0 {
			r.data.Entries = slices.Delete(r.data.Entries, i, i+1)
			continue
		}
		i++
	}
	b, err := json.MarshalIndent(&r.data, "", "  ")
	if err != nil {
		return fmt.Errorf("save checkpoint record: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		return fmt.Errorf("save checkpoint record: %w", err)
	}
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save checkpoint record: %w", err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return fmt.Errorf("save checkpoint record: %w", err)
	}
	return nil
}

// find returns the entry with seq, or nil.
func (d *recordFile) find(seq int) *Entry {
	for _, e := range d.Entries {
		if e.Seq == seq {
			return e
		}
	}
	return nil
}

// Saw records written entries that completed (or were first found) now.
// An entry already in the record (same host, path and stamp) is left
// alone; an entry of the same name and size written on another host, while
// some host still holds it as written, is another holder of that
// checkpoint (every host saving its own copy);
// anything else is a new checkpoint, newer than every one before it, in
// the order given. It returns the new entries.
func (r *Record) Saw(found []Found, now time.Time) ([]Entry, error) {
	var added []Entry
	err := r.update(func(d *recordFile) bool {
		changed := false
		for _, f := range found {
			if e := d.match(f); e != nil {
				if _, ok := e.holder(Written, f.Host); !ok {
					e.Held = append(e.Held, Location{Kind: Written, Host: f.Host, Path: f.Path, Stamp: f.Stamp})
					changed = true
				}
				continue
			}
			e := &Entry{Seq: d.Next, Name: f.Name, Size: f.Size, Seen: now,
				Held: []Location{{Kind: Written, Host: f.Host, Path: f.Path, Stamp: f.Stamp}}}
			d.Next++
			d.Entries = append(d.Entries, e)
			added = append(added, *e)
			changed = true
		}
		return changed
	})
	return added, err
}

// match is the entry f is a version of, or nil for a new checkpoint.
func (d *recordFile) match(f Found) *Entry {
	for i := len(d.Entries) - 1; i >= 0; i-- {
		e := d.Entries[i]
		if e.Name != f.Name {
			continue
		}
		if l, ok := e.holder(Written, f.Host); ok {
			if l.Path == f.Path && l.Stamp == f.Stamp {
				return e
			}
			return nil // rewritten under the same name: a new checkpoint
		}
		if !f.IsDir && e.Size == f.Size && e.written() {
			return e
		}
		return nil
	}
	return nil
}

// written reports whether some host still holds e as training wrote it.
// Only then can the same name and size on another host be that host's own
// save of it: an entry left only as drover's copies (an earlier run with
// the same log directory, a host since lost) is a different checkpoint
// that happens to share the name, as every run's step-20 save does.
func (e *Entry) written() bool {
	return slices.ContainsFunc(e.Held, func(l Location) bool { return l.Kind == Written })
}

// Add notes that loc holds checkpoint seq, with the content digest and
// total size learnt while copying it.
func (r *Record) Add(seq int, loc Location, digest string, size int64) error {
	return r.update(func(d *recordFile) bool {
		e := d.find(seq)
		if e == nil {
			return false
		}
		if digest != "" {
			e.Digest, e.Size = digest, size
		}
		for _, l := range e.Held {
			if l == loc {
				return digest != ""
			}
		}
		e.Held = append(e.Held, loc)
		return true
	})
}

// Drop notes that loc no longer holds checkpoint seq (deleted by training
// code, or drover's own copy beyond checkpoint_keep).
func (r *Record) Drop(seq int, loc Location) error {
	return r.update(func(d *recordFile) bool {
		e := d.find(seq)
		if e == nil {
			return false
		}
		n := len(e.Held)
		e.Held = slices.DeleteFunc(e.Held, func(l Location) bool { return l == loc })
		return len(e.Held) != n
	})
}
