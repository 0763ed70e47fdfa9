package stage

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// File is one file of a data set: its size, its mtime in whole seconds
// (what SFTP can set) and, where known, its SHA-256 in hex.
type File struct {
	Size  int64  `json:"size"`
	MTime int64  `json:"mtime"`
	Sum   string `json:"sha256,omitempty"`
}

// Listing is a data set's files by slash-separated path under its root.
type Listing map[string]File

// Bytes is the total size of the files of l named by rels.
func (l Listing) Bytes(rels []string) int64 {
	var n int64
	for _, r := range rels {
		n += l[r].Size
	}
	return n
}

// Total is the size of every file of l.
func (l Listing) Total() int64 {
	var n int64
	for _, f := range l {
		n += f.Size
	}
	return n
}

// HostState is what one host holds of a data set.
type HostState struct {
	Name string
	// Manifest is what drover staged there before (nil: nothing).
	Manifest Listing
	// Disk is what the destination holds now; Sum filled only when
	// verifying.
	Disk Listing
	// Free is the bytes free at the destination; negative when unknown.
	Free int64
	// Dest is the destination's absolute path there (for messages).
	Dest string
}

// unchanged says whether drover may skip rel on h: the manifest says it
// put the source's size and mtime there, the disk still holds them, and,
// verifying, the disk's content hashes to the manifest's sum.
func unchanged(src File, h HostState, rel string, verify bool) bool {
	m, staged := h.Manifest[rel]
	d, there := h.Disk[rel]
	if !staged || !there || m.Sum == "" {
		return false
	}
	if m.Size != src.Size || m.MTime != src.MTime || d.Size != m.Size || d.MTime != m.MTime {
		return false
	}
	return !verify || d.Sum == m.Sum
}

// Needs is the sorted list of files of src that h must receive.
func Needs(src Listing, h HostState, verify bool) []string {
	var out []string
	for rel, f := range src {
		if !unchanged(f, h, rel, verify) {
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out
}

// Batch is one chain's transfer: Files go from the source to every host
// of Hosts, in that order along the chain.
type Batch struct {
	Hosts []string
	Files []string
	Bytes int64
}

// Plan is what one staging of a data set sends.
type Plan struct {
	// Need is each host's files to receive, Unchanged how many it keeps.
	Need      map[string][]string
	Unchanged map[string]int
	// Batches in the order they are sent.
	Batches []Batch
}

// Limits of one batch: what an interrupted staging may have to send
// again, against the cost of starting a chain (one agent per host).
const (
	MaxBatchBytes = 1 << 30
	MaxBatchFiles = 20000
)

// MakePlan plans staging src onto hosts (in the job's order). Hosts that
// need the same files share a chain; a chain's files are cut into
// batches of at most maxBytes and maxFiles (MaxBatchBytes, MaxBatchFiles
// when 0). A file larger than maxBytes is a batch of its own.
func MakePlan(src Listing, hosts []HostState, verify bool, maxBytes int64, maxFiles int) Plan {
	if maxBytes <= 0 {
		maxBytes = MaxBatchBytes
	}
	if maxFiles <= 0 {
		maxFiles = MaxBatchFiles
	}
	p := Plan{Need: map[string][]string{}, Unchanged: map[string]int{}}
	groups := map[string][]string{} // file set -> hosts
	var order []string
	for _, h := range hosts {
		need := Needs(src, h, verify)
		p.Need[h.Name] = need
		p.Unchanged[h.Name] = len(src) - len(need)
		if len(need) == 0 {
			continue
		}
		k := strings.Join(need, "\x00")
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], h.Name)
	}
	for _, k := range order {
		files := strings.Split(k, "\x00")
		p.Batches = append(p.Batches, cut(src, groups[k], files, maxBytes, maxFiles)...)
	}
	return p
}

// cut splits files (sorted) into batches for hosts.
func cut(src Listing, hosts, files []string, maxBytes int64, maxFiles int) []Batch {
	var out []Batch
	cur := Batch{Hosts: hosts}
	for _, f := range files {
		size := src[f].Size
		if len(cur.Files) > 0 && (cur.Bytes+size > maxBytes || len(cur.Files) >= maxFiles) {
			out = append(out, cur)
			cur = Batch{Hosts: hosts}
		}
		cur.Files = append(cur.Files, f)
		cur.Bytes += size
	}
	if len(cur.Files) > 0 {
		out = append(out, cur)
	}
	return out
}

// NoSpaceError says a host has less free space at a destination than a
// staging would write there.
type NoSpaceError struct {
	Host, Dest string
	Need, Free int64
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("stage onto %s: %s needs %s, %s free there; free some space on %s or choose another dest",
		e.Host, e.Dest, HumanBytes(e.Need), HumanBytes(e.Free), e.Host)
}

// CheckSpace returns a *NoSpaceError for each host of hosts whose known
// free space is less than what p sends it.
func CheckSpace(src Listing, hosts []HostState, p Plan) []error {
	var errs []error
	for _, h := range hosts {
		need := src.Bytes(p.Need[h.Name])
		if h.Free >= 0 && need > h.Free {
			errs = append(errs, &NoSpaceError{Host: h.Name, Dest: h.Dest, Need: need, Free: h.Free})
		}
	}
	return errs
}

// Update is the manifest of a host after it received files (each with
// the sum the stream checked it against): the old one, less what the
// source no longer has, with the received files at the source's size and
// mtime.
func Update(old, src Listing, received map[string]string) Listing {
	out := Listing{}
	for rel, f := range old {
		if _, ok := src[rel]; ok {
			out[rel] = f
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(received)) {
		f := src[rel]
		f.Sum = received[rel]
		out[rel] = f
	}
	return out
}

// HumanBytes writes n in binary units (MiB, GiB) as people read sizes.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
