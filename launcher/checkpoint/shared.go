package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/droverhq/drover/cluster"
)

// A detached run keeps a copy of its record on its hosts, so that a
// supervisor that adopts the run from another machine (which has no
// runs/ directory of it) goes on with the same record: the same sequence
// numbers, digests and holders, rather than a new record that would
// order the checkpoints it finds by chance. The hosts are untrusted: a
// record read from one is bounded, and every entry and location in it is
// checked (Places) before it is believed.

// MaxSharedRecord bounds the size of a record read from a host.
const MaxSharedRecord = 8 << 20

// Shared returns the record as it is kept on the hosts, and a count of
// its changes: the caller writes it again only when the count moved.
func (r *Record) Shared() ([]byte, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := json.Marshal(&r.data)
	if err != nil {
		return nil, 0, fmt.Errorf("encode checkpoint record: %w", err)
	}
	return b, r.changes, nil
}

// Places says where a record read from a host may point: the directories
// each host's entries may be in (its checkpoint_dir and drover's copy
// area) and the controller's mirror. A location anywhere else is dropped.
type Places struct {
	// Hosts maps a host's name to the absolute directories its
	// locations may be under.
	Hosts map[string][]string
	// Mirror is checkpoint_mirror on this machine ("" for none).
	Mirror string
}

// allows reports whether l points into one of p's directories.
func (p Places) allows(l Location) bool {
	switch l.Kind {
	case Mirror:
		return l.Host == "" && p.Mirror != "" && filepath.IsAbs(l.Path) && under(filepath.Clean(p.Mirror), filepath.Clean(l.Path), string(filepath.Separator))
	case Written, Copy:
		for _, dir := range p.Hosts[l.Host] {
			if path.IsAbs(l.Path) && path.Clean(l.Path) == l.Path && under(path.Clean(dir), l.Path, "/") {
				return true
			}
		}
	}
	return false
}

// under reports whether p is strictly inside dir.
func under(dir, p, sep string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, sep)+sep)
}

// AdoptShared merges b, a record read from host, into r. A host's copy
// is evidence of its own checkpoints only: of each entry, only the
// locations on host itself (and in the controller's mirror) are taken, so
// that a hostile host cannot renumber the checkpoints other hosts hold
// and make an older one the newest for everyone (a silent rollback). An
// entry whose sequence number r already gives another checkpoint is not
// taken, and the error names it; the rest are. Entries with a name a
// host must not give (see cluster.CheckName) are dropped, and so are
// locations outside places. It reports whether r changed.
func (r *Record) AdoptShared(b []byte, host string, places Places) (bool, error) {
	if len(b) > MaxSharedRecord {
		return false, fmt.Errorf("checkpoint record on %s: %d bytes, more than the %d a record may have", host, len(b), MaxSharedRecord)
	}
	var got recordFile
	if err := json.Unmarshal(b, &got); err != nil {
		return false, fmt.Errorf("read the checkpoint record on %s: %w", host, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got.Job != r.data.Job {
		return false, fmt.Errorf("checkpoint record on %s is job %.100s's, not %s's", host, cluster.Escape(got.Job), r.data.Job)
	}
	took, conflicts := mergeOwn(&r.data, sanitize(got.Entries, host, places), host)
	var err error
	if len(conflicts) > 0 {
		err = fmt.Errorf("checkpoint record on %s disagrees with the others on checkpoints %v (its entries of them are not taken)", host, conflicts)
	}
	if !took {
		return false, err
	}
	return true, errors.Join(err, r.saveLocked())
}

// mergeOwn adds to d, of each of entries (read from host, sanitized),
// the locations on host and in the mirror, and the entries d lacks; it
// returns whether d changed and the sequence numbers whose entry in d is
// another checkpoint.
func mergeOwn(d *recordFile, entries []*Entry, host string) (bool, []int) {
	bySeq := map[int]*Entry{}
	for _, e := range d.Entries {
		bySeq[e.Seq] = e
	}
	changed := false
	var conflicts []int
	for _, e := range entries {
		e.Held = slices.DeleteFunc(e.Held, func(l Location) bool { return l.Host != host && l.Kind != Mirror })
		have, ok := bySeq[e.Seq]
		if !ok {
			d.Entries = append(d.Entries, e)
			bySeq[e.Seq] = e
			d.Next = max(d.Next, e.Seq+1)
			changed = true
			continue
		}
		if have.Name != e.Name || (have.Digest != "" && e.Digest != "" && have.Digest != e.Digest) {
			conflicts = append(conflicts, e.Seq)
			continue
		}
		for _, l := range e.Held {
			if !slices.Contains(have.Held, l) {
				have.Held = append(have.Held, l)
				changed = true
			}
		}
	}
	if changed {
		slices.SortFunc(d.Entries, func(a, b *Entry) int { return a.Seq - b.Seq })
	}
	return changed, conflicts
}

// sanitize keeps the entries of a record read from host that are well
// formed, each with only the locations places allows, in ascending
// sequence order without repeats.
func sanitize(entries []*Entry, host string, places Places) []*Entry {
	var kept []*Entry
	last := 0
	for _, e := range entries {
		if e == nil || e.Seq <= last || e.Seq > 1<<30 || cluster.CheckName(host, "", e.Name) != nil {
			continue
		}
		held := e.Held[:0]
		for _, l := range e.Held {
			if places.allows(l) && (l.Part == "" || places.Hosts[l.Part] != nil) && !renumbered(l, e.Seq, places) {
				held = append(held, l)
			}
		}
		e.Held = held
		for _, p := range e.Parts {
			if places.Hosts[p] == nil {
				e.Parts = nil // a part on no host of the job: whole never
				e.Held = nil
				break
			}
		}
		last = e.Seq
		kept = append(kept, e)
	}
	return kept
}

// renumbered reports whether l is one of drover's copies in the mirror
// (<mirror>/<seq>/...) of a checkpoint other than seq: a host's record
// must not make an old copy there stand for a newer checkpoint.
func renumbered(l Location, seq int, places Places) bool {
	if l.Kind != Mirror {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(places.Mirror), filepath.Clean(l.Path))
	if err != nil {
		return true
	}
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	n, ok := parseSeqDir(first)
	return ok && n != seq
}
