package push

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The scan's digest cache, like git's index: for every file it hashed,
// ScanLocal records the digest with the file's size, mtime, ctime, device
// and inode, and a later scan reuses the digest of a file whose five are
// all unchanged. ctime cannot be set back by touch or by an unpacker the
// way mtime can, so an edit that keeps size and mtime is still seen.
//
// A file that changed in the same clock tick as it was hashed would keep
// its timestamps, so entries younger than racyWindow at the start of the
// scan are not stored: those files are hashed again next time.
const (
	cacheHeader = "drover-scan-cache 1"
	racyWindow  = 2 * time.Second
)

// statID is what a cached digest is keyed on. A zero statID (a platform
// without ctime and inode in os.FileInfo) is never cached.
type statID struct {
	size, mtime, ctime int64
	dev, ino           uint64
}

type cacheEntry struct {
	id     statID
	sha256 string
}

// cachePath names the cache file of one code directory (resolved root).
func cachePath(cacheDir, root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(cacheDir, "scan", hex.EncodeToString(sum[:12])+".txt")
}

// eachCacheEntry calls fn for the entries of a cache file, in order,
// until fn returns false. Any problem (no file yet, another format, a line
// that does not parse) ends the entries early, since a missing entry only
// means hashing the file.
func eachCacheEntry(file string, fn func(path string, e cacheEntry) bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return
	}
	// One string for the whole file: every field is cut from it.
	header, rest, _ := strings.Cut(string(data), "\n")
	if header != cacheHeader {
		return
	}
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		// sha256 size mtime ctime dev ino path (the path last: it may
		// hold spaces).
		var fields [7]string
		for i := range 6 {
			fields[i], line, _ = strings.Cut(line, " ")
		}
		fields[6] = line
		if len(fields[0]) != 64 || fields[6] == "" {
			return
		}
		var n [3]int64
		var u [2]uint64
		for i := range n {
			v, err := strconv.ParseInt(fields[i+1], 10, 64)
			if err != nil {
				return
			}
			n[i] = v
		}
		for i := range u {
			v, err := strconv.ParseUint(fields[i+4], 10, 64)
			if err != nil {
				return
			}
			u[i] = v
		}
		e := cacheEntry{id: statID{size: n[0], mtime: n[1], ctime: n[2], dev: u[0], ino: u[1]}, sha256: fields[0]}
		if !fn(fields[6], e) {
			return
		}
	}
}

// saveCache writes the cacheable digests of files atomically (write, then
// rename), so a concurrent scan reads the old cache or the new one. A
// cache that cannot be written is not an error: the next scan hashes.
func saveCache(file string, files []File, scanStart time.Time) {
	racy := scanStart.Add(-racyWindow).UnixNano()
	b := make([]byte, 0, len(files)*150)
	b = append(b, cacheHeader+"\n"...)
	for i := range files {
		f := &files[i]
		id := f.id
		if id == (statID{}) || f.Size != id.size || id.mtime >= racy || id.ctime >= racy || strings.ContainsAny(f.Path, "\n\r") {
			continue
		}
		b = append(b, f.SHA256...)
		for _, n := range []int64{id.size, id.mtime, id.ctime} {
			b = strconv.AppendInt(append(b, ' '), n, 10)
		}
		b = strconv.AppendUint(append(b, ' '), id.dev, 10)
		b = strconv.AppendUint(append(b, ' '), id.ino, 10)
		b = append(append(append(b, ' '), f.Path...), '\n')
	}
	writeFileAtomic(file, b)
}

// useCache fills in the digest of every file whose stat identity matches
// its cache entry and reports whether the cache needs rewriting (a file
// to hash, or an entry for a file that is gone). files are sorted by
// path, and so are the entries saveCache wrote: one merge, no map of
// 3,000 entries to build at every push.
func useCache(files []File, cacheFile string) (dirty bool) {
	i, hits, entries, prev := 0, 0, 0, ""
	eachCacheEntry(cacheFile, func(p string, e cacheEntry) bool {
		if entries > 0 && p <= prev {
			return false // out of order: not a file saveCache wrote
		}
		prev = p
		entries++
		for i < len(files) && files[i].Path < p {
			i++
		}
		if i < len(files) && files[i].Path == p && files[i].id != (statID{}) && e.id == files[i].id {
			files[i].SHA256 = e.sha256
			hits++
		}
		return true
	})
	return hits != len(files) || hits != entries
}

// fileStatID extracts the cache key from a stat result.
func fileStatID(info fs.FileInfo) statID {
	id := sysStatID(info)
	if id != (statID{}) {
		id.size = info.Size()
		id.mtime = info.ModTime().UnixNano()
	}
	return id
}
