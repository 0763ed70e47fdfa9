package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
)

// maxManifest bounds what drover reads of a MANIFEST: a host's copy area
// is the host's to write, and a huge file there must not exhaust the
// controller. 16 MiB holds the lines of some 100,000 files.
const maxManifest = 16 << 20

// errNoCopy says there is no whole copy in a directory: no MANIFEST, as
// when a copy was cut short or pruned. It is not damage.
var errNoCopy = errors.New("no MANIFEST: not a whole copy")

// manifestLine is one file of a MANIFEST.
type manifestLine struct {
	rel  string // under <seq>/, starting with the checkpoint's name
	size int64
	sum  string // hex sha256
}

// parseManifest reads the lines copier.file writes: a quoted path under
// <seq>/, its size and its sha256.
func parseManifest(b []byte) ([]manifestLine, error) {
	var out []manifestLine
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		q, err := strconv.QuotedPrefix(line)
		var l manifestLine
		var rest string
		if err == nil {
			l.rel, err = strconv.Unquote(q)
			rest = strings.TrimPrefix(line[len(q):], " ")
		}
		if err == nil {
			size, sum, ok := strings.Cut(rest, " ")
			l.sum = sum
			if l.size, err = strconv.ParseInt(size, 10, 64); err == nil && (!ok || len(sum) != 64 || l.size < 0) {
				err = errors.New("want a quoted path, a size and a sha256")
			}
		}
		if err == nil && !fs.ValidPath(l.rel) {
			err = fmt.Errorf("%q is not a path inside the copy", l.rel)
		}
		if err != nil {
			return nil, fmt.Errorf("MANIFEST line %d: %w", i+1, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// verifyCopy checks drover's copy in dir (<own>/<seq>) against its
// MANIFEST before anything resumes from it: the MANIFEST is the one
// recorded (digest, "" when none is), every file it lists is a regular
// file of the size it says, and a file modified since the copy was made
// (its modification time not older than the MANIFEST's; copier.stamp
// dates every file of a copy before its MANIFEST) has the sha256 it says.
// Reading only what changed keeps staging cheap for large checkpoints,
// while a copy truncated or rewritten on its host is never handed out as
// DROVER_RESUME_FROM. errNoCopy when there is no MANIFEST.
func verifyCopy(fsys cluster.FS, dir, digest string) error {
	mpath := path.Join(dir, ManifestName)
	mi, err := fsys.Stat(mpath)
	if err != nil {
		return fmt.Errorf("%w (%v)", errNoCopy, err)
	}
	b, err := readManifest(fsys, mpath)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); digest != "" && got != digest {
		return fmt.Errorf("its MANIFEST changed since drover wrote it (sha256 %.12s, recorded %.12s)", got, digest)
	}
	lines, err := parseManifest(b)
	if err != nil {
		return err
	}
	for _, l := range lines {
		p := path.Join(dir, l.rel)
		fi, err := fsys.Lstat(p)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", l.rel, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file (%s)", l.rel, fi.Mode().Type())
		case fi.Size() != l.size:
			return fmt.Errorf("%s is %d bytes; its MANIFEST says %d", l.rel, fi.Size(), l.size)
		case !fi.ModTime().Before(truncSecond(mi.ModTime())):
			if err := checkSum(fsys, p, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncSecond drops what SFTP's whole-second times cannot show.
func truncSecond(t time.Time) time.Time { return t.Truncate(time.Second) }

func readManifest(fsys cluster.FS, p string) ([]byte, error) {
	r, err := fsys.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read MANIFEST: %w", err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("read MANIFEST: %w", err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("MANIFEST is over %d bytes: not one drover wrote", maxManifest)
	}
	return b, nil
}

// checkSum reads the file at p whole and compares its sha256 with l's.
func checkSum(fsys cluster.FS, p string, l manifestLine) error {
	r, err := fsys.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", l.rel, err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{r}, make([]byte, 256<<10)); err != nil {
		return fmt.Errorf("%s: %w", l.rel, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != l.sum {
		return fmt.Errorf("%s changed since the copy was made (sha256 %.12s; its MANIFEST says %.12s)", l.rel, got, l.sum)
	}
	return nil
}

// stamp dates every file of d's copy a second before its MANIFEST, so
// that verifyCopy tells a file modified since (on the host's own clock,
// as the MANIFEST's time is) from one written by the copy, and hashes
// only the first. Without it the copy's last file, written in the same
// second as the MANIFEST, would be read whole at every staging.
func (c *copier) stamp(d *dest) error {
	mi, err := d.fs.Stat(path.Join(d.tmp, ManifestName))
	if err != nil {
		return err
	}
	t := truncSecond(mi.ModTime()).Add(-time.Second)
	// Many at once: over SFTP each is a round trip, and a checkpoint may
	// be thousands of files.
	work := make(chan string)
	errs := make(chan error, stampWorkers)
	for range stampWorkers {
		go func() {
			var first error
			for rel := range work {
				if err := d.fs.Chtimes(path.Join(d.tmp, rel), t, t); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, rel := range c.rels {
		work <- rel
	}
	close(work)
	var all []error
	for range stampWorkers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// stampWorkers is how many modification times stamp sets at once.
const stampWorkers = 16
