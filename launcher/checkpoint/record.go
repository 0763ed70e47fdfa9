package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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
	// Part is, for drover's copy of a part of a sharded checkpoint, the
	// host that wrote that part; "" otherwise (a Written location holds
	// its own host's part).
	Part string `json:"part,omitempty"`
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
	// Parts are, for a checkpoint of the sharded layout, the hosts that
	// wrote a part of it: it is whole only with every one of them, and
	// PartDigests holds the sha256 of the MANIFEST of drover's copy of
	// each part.
	Parts       []string          `json:"parts,omitempty"`
	PartDigests map[string]string `json:"part_digests,omitempty"`
	PartSizes   map[string]int64  `json:"part_sizes,omitempty"`
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
	// work counts the entries Saw looked at: tests check that it grows
	// linearly with the entries, not with their square.
	work int
	// changes counts the saves, so that the copy on the hosts is
	// written again only after one (see Shared).
	changes int
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
		out[i].Parts = slices.Clone(e.Parts)
		out[i].PartDigests = maps.Clone(e.PartDigests)
		out[i].PartSizes = maps.Clone(e.PartSizes)
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

// scratch is a copy of the record that is never saved: what a listing
// learns from the hosts (Current) must not race a running supervisor's
// own saves of the file.
func (r *Record) scratch() *Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Record{max: r.max, data: recordFile{Job: r.data.Job, Next: r.data.Next}}
	for _, e := range r.data.Entries {
		cp := *e
		cp.Held = slices.Clone(e.Held)
		cp.Parts = slices.Clone(e.Parts)
		cp.PartDigests = maps.Clone(e.PartDigests)
		cp.PartSizes = maps.Clone(e.PartSizes)
		c.data.Entries = append(c.data.Entries, &cp)
	}
	return c
}

func (r *Record) saveLocked() error {
	if r.path == "" {
		return nil // a scratch copy
	}
	r.changes++
	if excess := len(r.data.Entries) - r.max; excess > 0 {
		// Oldest first, in one pass: forget entries held nowhere until
		// the record is back within bounds.
		kept := r.data.Entries[:0]
		for _, e := range r.data.Entries {
			if excess > 0 && len(e.Held) == 0 {
				excess--
				continue
			}
			kept = append(kept, e)
		}
		clear(r.data.Entries[len(kept):])
		r.data.Entries = kept
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
// alone, however many polls see it again; an entry of a name that the
// newest checkpoint of that name lacks on this host, while some host still
// holds that checkpoint as written, is another holder of it (every host
// saving its own part or copy of one checkpoint, at about the same time);
// anything else is a new checkpoint, newer than every one before it, in
// the order given. It returns the new entries.
//
// The matching goes through an index built once per call, so a
// checkpoint_dir of tens of thousands of entries costs time linear in
// their number, not its square (every poll lists every entry again).
func (r *Record) Saw(found []Found, now time.Time) ([]Entry, error) {
	var added []Entry
	err := r.update(func(d *recordFile) bool {
		changed := false
		idx := d.index(&r.work)
		for _, f := range found {
			r.work++
			loc := Location{Kind: Written, Host: f.Host, Path: f.Path, Stamp: f.Stamp}
			if e := idx.match(f, loc); e != nil {
				if _, ok := e.holder(Written, f.Host); !ok {
					e.Held = append(e.Held, loc)
					idx.at[loc] = e
					changed = true
				}
				continue
			}
			e := &Entry{Seq: d.Next, Name: f.Name, Size: f.Size, Seen: now, Held: []Location{loc}}
			d.Next++
			d.Entries = append(d.Entries, e)
			idx.at[loc], idx.last[f.Name] = e, e
			added = append(added, *e)
			changed = true
		}
		return changed
	})
	return added, err
}

// recordIndex finds in constant time the entry a Found belongs to.
type recordIndex struct {
	// at is the entry holding each written location (host, path, stamp).
	at map[Location]*Entry
	// last is the newest entry of each name.
	last map[string]*Entry
}

// index builds the recordIndex of d, adding the entries visited to work.
func (d *recordFile) index(work *int) *recordIndex {
	idx := &recordIndex{at: make(map[Location]*Entry, len(d.Entries)), last: make(map[string]*Entry, len(d.Entries))}
	for _, e := range d.Entries {
		*work++
		idx.last[e.Name] = e
		for _, l := range e.Held {
			if l.Kind == Written {
				idx.at[l] = e
			}
		}
	}
	return idx
}

// match is the entry f (at loc) is a version of, or nil for a new
// checkpoint. A location already recorded is always found in the entry
// that holds it: a checkpoint written on several hosts never becomes a
// new entry at every poll (it did, flipping between its holders, while a
// copy of each "new" one ran).
func (idx *recordIndex) match(f Found, loc Location) *Entry {
	if e := idx.at[loc]; e != nil {
		return e
	}
	e := idx.last[f.Name]
	if e == nil {
		return nil
	}
	if _, ok := e.holder(Written, f.Host); ok {
		return nil // rewritten under the same name on this host: a new checkpoint
	}
	if e.written() {
		return e // this host's part of a checkpoint other hosts hold
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

// seqLoc is one location of checkpoint seq.
type seqLoc struct {
	seq int
	loc Location
}

// dropAll drops every location in gone, saving once: a reconcile that
// finds thousands of entries gone must not rewrite the record for each.
func (r *Record) dropAll(gone []seqLoc) error {
	if len(gone) == 0 {
		return nil
	}
	drop := map[int][]Location{}
	for _, g := range gone {
		drop[g.seq] = append(drop[g.seq], g.loc)
	}
	return r.update(func(d *recordFile) bool {
		changed := false
		for _, e := range d.Entries {
			if locs := drop[e.Seq]; len(locs) > 0 {
				n := len(e.Held)
				e.Held = slices.DeleteFunc(e.Held, func(l Location) bool { return slices.Contains(locs, l) })
				changed = changed || len(e.Held) != n
			}
		}
		return changed
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

// NoteParts records, for checkpoints of the sharded layout, every host
// that holds one as written as the writer of a part of it: the parts a
// checkpoint needs are remembered after their hosts are lost.
func (r *Record) NoteParts() error {
	return r.update(func(d *recordFile) bool {
		changed := false
		for _, e := range d.Entries {
			for _, l := range e.Held {
				if l.Kind == Written && !slices.Contains(e.Parts, l.Host) {
					e.Parts = append(e.Parts, l.Host)
					slices.Sort(e.Parts)
					changed = true
				}
			}
		}
		return changed
	})
}

// ExpectParts adds hosts as parts of the sharded checkpoints added, seen
// first while those hosts of the group could not be listed (one lost as
// the checkpoint appeared): every host of the group writes a part, so a
// part drover never saw is missing, not absent, and a checkpoint missing
// it is never resumed from (its ranks would load a partial state).
func (r *Record) ExpectParts(added []Entry, hosts []string) error {
	if len(added) == 0 || len(hosts) == 0 {
		return nil
	}
	seqs := map[int]bool{}
	for _, e := range added {
		seqs[e.Seq] = true
	}
	return r.update(func(d *recordFile) bool {
		changed := false
		for _, e := range d.Entries {
			if !seqs[e.Seq] {
				continue
			}
			for _, h := range hosts {
				if !slices.Contains(e.Parts, h) {
					e.Parts = append(e.Parts, h)
					slices.Sort(e.Parts)
					changed = true
				}
			}
		}
		return changed
	})
}

// AddPart notes that loc holds drover's copy of part loc.Part of
// checkpoint seq, whose MANIFEST has the sha256 digest and whose files
// size bytes; the checkpoint's Size is the sum of its parts' known so far.
func (r *Record) AddPart(seq int, loc Location, digest string, size int64) error {
	return r.update(func(d *recordFile) bool {
		e := d.find(seq)
		if e == nil {
			return false
		}
		if e.PartDigests == nil {
			e.PartDigests, e.PartSizes = map[string]string{}, map[string]int64{}
		}
		e.PartDigests[loc.Part] = digest
		if e.PartSizes == nil {
			e.PartSizes = map[string]int64{}
		}
		e.PartSizes[loc.Part] = size
		e.Size = 0
		for _, n := range e.PartSizes {
			e.Size += n
		}
		if !slices.Contains(e.Held, loc) {
			e.Held = append(e.Held, loc)
		}
		return true
	})
}
