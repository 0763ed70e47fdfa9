package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
)

// ManifestName is the file beside each of drover's copies that lists
// every file of the checkpoint with its size and sha256. It is written
// last: a copy directory without it is not a copy.
const ManifestName = "MANIFEST"

// copyBuffer is the only memory a copy uses for data, however large the
// checkpoint: it is read from the source and written to every destination
// before the next read.
const copyBuffer = 1 << 20

// dest is one place a copy goes: a directory in drover's own area on a
// host, or the mirror.
type dest struct {
	label string // host name, or "mirror"
	loc   Location
	fs    cluster.FS
	own   string // drover's checkpoint area there
	tmp   string // <own>/<seq>.tmp while writing
	final string // <own>/<seq>
	err   error  // the first failure; the copy goes on to the others
	w     io.WriteCloser
}

func seqDir(seq int) string { return fmt.Sprintf("%06d", seq) }

// parseSeqDir is the inverse of seqDir; ok is false for anything else
// (temporary directories, stray files).
func parseSeqDir(name string) (int, bool) {
	if len(name) < 6 || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(name)
	return n, err == nil
}

// partDir is where drover's copy of part (a host's name) of sharded
// checkpoint seq lives under own: <seq>/parts/<part>, beside the union
// <seq>/<name> that staging builds from every part.
func partDir(own string, seq int, part string) string {
	return path.Join(own, seqDir(seq), "parts", part)
}

// newPartDest is where a copy of one part of a sharded checkpoint goes.
func newPartDest(h Host, fsys cluster.FS, seq int, part, name string) *dest {
	final := partDir(h.Own, seq, part)
	return &dest{label: h.Name, fs: fsys, own: h.Own, tmp: final + ".tmp", final: final,
		loc: Location{Kind: Copy, Host: h.Name, Part: part, Path: path.Join(final, name)}}
}

func newDest(label string, kind, host string, fsys cluster.FS, own string, seq int, name string) *dest {
	d := &dest{label: label, fs: fsys, own: own, tmp: path.Join(own, seqDir(seq)+".tmp"), final: path.Join(own, seqDir(seq))}
	d.loc = Location{Kind: kind, Host: host, Path: path.Join(d.final, name)}
	return d
}

func (d *dest) fail(err error) {
	if d.err == nil {
		d.err = fmt.Errorf("copy checkpoint to %s %s: %w", d.label, d.final, err)
	}
	if d.w != nil {
		d.w.Close()
		d.w = nil
	}
}

// fanout writes to every destination still healthy and into the hash; a
// destination that fails drops out, and the copy fails only when none is
// left.
type fanout struct {
	ctx   context.Context
	dests []*dest
	h     hash.Hash
}

func (f *fanout) Write(p []byte) (int, error) {
	if err := f.ctx.Err(); err != nil {
		return 0, err
	}
	f.h.Write(p)
	alive := 0
	for _, d := range f.dests {
		if d.w == nil {
			continue
		}
		if _, err := d.w.Write(p); err != nil {
			d.fail(err)
			continue
		}
		alive++
	}
	if alive == 0 {
		return 0, errors.New("every destination failed")
	}
	return len(p), nil
}

// copier streams one checkpoint from its source to its destinations.
type copier struct {
	ctx      context.Context
	src      cluster.FS
	srcLabel string
	dests    []*dest
	buf      []byte
	manifest bytes.Buffer
	rels     []string // the files written, as the MANIFEST names them
	size     int64
	lim      *limiter
	idle     time.Duration
}

// copyEntry copies the file or directory srcPath (named name) into every
// destination's <seq>/<name>, writes MANIFEST and renames each
// destination into place. It returns the digest (sha256 of MANIFEST) and
// the total size. A destination that failed has its err set and its
// temporary directory removed; the error return is for the source (or
// every destination) failing.
// lim, when not nil, holds the reads from the source to its rate; a read
// from the source that returns nothing for idle (CopyIdle when 0) ends the
// copy (stallReader).
func copyEntry(ctx context.Context, src cluster.FS, srcLabel, srcPath, name string, dests []*dest, lim *limiter, idle time.Duration) (digest string, size int64, err error) {
	// The destination is <seq>/<name> under drover's own area, built by
	// drover; name came from a host's listing, so it must stay one entry.
	if err := cluster.CheckName(srcLabel, path.Dir(srcPath), name); err != nil {
		return "", 0, err
	}
	if idle <= 0 {
		idle = CopyIdle
	}
	c := &copier{ctx: ctx, src: src, srcLabel: srcLabel, dests: dests, buf: make([]byte, copyBuffer), lim: lim, idle: idle}
	defer func() {
		for _, d := range dests {
			if d.err != nil || err != nil {
				_ = d.fs.RemoveAll(d.tmp)
			}
		}
	}()
	for _, d := range dests {
		if e := d.fs.RemoveAll(d.tmp); e != nil && !errors.Is(e, fs.ErrNotExist) {
			d.fail(e)
			continue
		}
		if e := d.fs.MkdirAll(d.tmp, 0o700); e != nil {
			d.fail(e)
		}
	}
	fi, err := src.Stat(srcPath)
	if err != nil {
		return "", 0, fmt.Errorf("read checkpoint %s on %s: %w", srcPath, srcLabel, err)
	}
	if err := c.entry(srcPath, name, fi); err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(c.manifest.Bytes())
	for _, d := range c.live() {
		if err := c.finish(d); err != nil {
			d.fail(err)
		}
	}
	if len(c.live()) == 0 {
		return "", 0, c.destErr()
	}
	return hex.EncodeToString(sum[:]), c.size, nil
}

func (c *copier) live() []*dest {
	var out []*dest
	for _, d := range c.dests {
		if d.err == nil {
			out = append(out, d)
		}
	}
	return out
}

func (c *copier) destErr() error {
	var errs []error
	for _, d := range c.dests {
		errs = append(errs, d.err)
	}
	return errors.Join(errs...)
}

// entry copies one file or directory tree; rel is its path under <seq>/.
func (c *copier) entry(srcPath, rel string, fi fs.FileInfo) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		for _, d := range c.live() {
			if err := d.fs.MkdirAll(path.Join(d.tmp, rel), 0o700); err != nil {
				d.fail(err)
			}
		}
		kids, err := c.src.ReadDir(srcPath)
		if err != nil {
			return fmt.Errorf("read checkpoint %s on %s: %w", srcPath, c.srcLabel, err)
		}
		for _, k := range kids {
			// A name the source lists ("..", "", "x/..") would take the
			// copy out of <seq>.tmp on every destination: refuse the
			// checkpoint rather than skip part of it.
			if err := cluster.CheckName(c.srcLabel, srcPath, k.Name()); err != nil {
				return fmt.Errorf("read checkpoint %s on %s: %w", srcPath, c.srcLabel, err)
			}
			if err := c.entry(path.Join(srcPath, k.Name()), path.Join(rel, k.Name()), k); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		return c.file(srcPath, rel)
	}
	return nil // sockets, devices, links: not part of a checkpoint drover can copy
}

// file streams one regular file to every live destination.
func (c *copier) file(srcPath, rel string) error {
	r, err := c.src.Open(srcPath)
	if err != nil {
		return fmt.Errorf("read checkpoint %s on %s: %w", srcPath, c.srcLabel, err)
	}
	sr := &stallReader{r: r, idle: c.idle, label: c.srcLabel}
	defer sr.close(r)
	for _, d := range c.live() {
		if d.w, err = d.fs.Create(path.Join(d.tmp, rel)); err != nil {
			d.fail(err)
		}
	}
	f := &fanout{ctx: c.ctx, dests: c.live(), h: sha256.New()}
	var in io.Reader = sr
	if c.lim != nil {
		in = limitedReader{ctx: c.ctx, r: sr, l: c.lim}
	}
	n, err := io.CopyBuffer(f, in, c.buf)
	if err != nil {
		if ctxErr := c.ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if len(c.live()) == 0 {
			return c.destErr()
		}
		return fmt.Errorf("read checkpoint %s on %s: %w", srcPath, c.srcLabel, err)
	}
	for _, d := range c.live() {
		if d.w != nil {
			// On the disk before the rename that says the copy is whole.
			err := cluster.Fsync(d.w)
			if cerr := d.w.Close(); err == nil {
				err = cerr
			}
			d.w = nil
			if err != nil {
				d.fail(err)
			}
		}
	}
	c.size += n
	c.rels = append(c.rels, rel)
	writeManifestLine(&c.manifest, rel, n, f.h.Sum(nil))
	return nil
}

// finish writes MANIFEST and moves the copy into place.
func (c *copier) finish(d *dest) error {
	w, err := d.fs.Create(path.Join(d.tmp, ManifestName))
	if err != nil {
		return err
	}
	if _, err := w.Write(c.manifest.Bytes()); err != nil {
		w.Close()
		return err
	}
	if err := cluster.Fsync(w); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := c.stamp(d); err != nil {
		return err
	}
	if err := d.fs.RemoveAll(d.final); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.fs.Rename(d.tmp, d.final)
}

// prune removes drover's copies in own beyond the newest keep, except
// protect (the copy just made, which may be older than others there when
// staging fell back to an older checkpoint), and temporary directories of
// copies that did not finish (only one copy runs at a time per job, so
// none is in progress). It returns the seqs removed.
func prune(fsys cluster.FS, own string, keep, protect int) ([]int, error) {
	entries, err := fsys.ReadDir(own)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var seqs []int
	var errs []error
	for _, e := range entries {
		if n, ok := parseSeqDir(e.Name()); ok {
			seqs = append(seqs, n)
		} else if base, ok := strings.CutSuffix(e.Name(), ".tmp"); ok {
			if _, ok := parseSeqDir(base); ok {
				errs = append(errs, fsys.RemoveAll(path.Join(own, e.Name())))
			}
		}
	}
	slices.Sort(seqs)
	seqs = slices.DeleteFunc(seqs, func(n int) bool { return n == protect })
	var removed []int
	for len(seqs) > max(keep, 1)-1 {
		if err := fsys.RemoveAll(path.Join(own, seqDir(seqs[0]))); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, seqs[0])
		}
		seqs = seqs[1:]
	}
	return removed, errors.Join(errs...)
}

// stallReader is the relay's idle deadline on its source: a read that
// returns nothing for idle (the host's SFTP server stopped, its disk
// stuck) fails with an *IdleError instead of hanging the copy, and with
// it a restart. A remote file's read cannot be interrupted, so it is left
// to end with its connection; its buffer is not used again, as the copy
// has failed.
type stallReader struct {
	r       io.Reader
	idle    time.Duration
	label   string
	stalled bool
}

type readResult struct {
	n   int
	err error
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.stalled {
		return 0, errors.New("a read of the checkpoint is still pending")
	}
	ch := make(chan readResult, 1)
	go func() {
		n, err := s.r.Read(p)
		ch <- readResult{n, err}
	}()
	t := time.NewTimer(s.idle)
	defer t.Stop()
	select {
	case res := <-ch:
		return res.n, res.err
	case <-t.C:
		s.stalled = true
		return 0, &IdleError{Peer: s.label, Idle: s.idle, Err: errors.New("a read of the checkpoint returned nothing")}
	}
}

// close closes the source file, without waiting when a read is stalled
// on it (its close would wait too).
func (s *stallReader) close(c io.Closer) {
	if s.stalled {
		go c.Close()
		return
	}
	c.Close()
}
