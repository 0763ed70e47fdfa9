package push

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
)

// The upload, a push's third phase: the plan's changed files go to
// temporary names in the upload directory (tmpDir), modes and mtimes set,
// so that the commit has only renames left. Few files go one SFTP
// transfer each (upload), many as one tar stream (stream.go); a verified
// push with few changes starts before its plan is final (preUpload).

// uploader sends a plan's files to one host.
type uploader struct {
	*hostPush
	// newWorkdir: the scan found the workdir as new as Options.NewWorkdir
	// says (hostScan.newWorkdir).
	newWorkdir bool
	// createMode is the mode the host gives a new file (0666 less its
	// umask), learnt before a large upload; an upload whose mode is that
	// already needs no chmod. Zero: unknown, chmod every file.
	createMode fs.FileMode
	// pre: what was sent before guard, or nil.
	pre *preUpload
}

// prepare readies the upload directory: it removes what an interrupted
// push left there, then, for a plan with nothing to change, the directory
// the scan made (look), or else makes it when the scan did not.
func (up *uploader) prepare(p *plan) error {
	if p.hadTmp {
		if err := up.fs.RemoveAll(up.remote(tmpDir)); err != nil {
			return fmt.Errorf("remove leftovers of an interrupted push in %s: %w", tmpDir, err)
		}
	}
	if p.empty() && !p.rewrite {
		if p.madeTmp {
			if err := up.removeDir(up.remote(tmpDir)); err != nil {
				return fmt.Errorf("remove %s: %w", tmpDir, err)
			}
		}
		return nil
	}
	if !p.madeTmp {
		if err := up.fs.MkdirAll(up.remote(tmpDir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", tmpDir, err)
		}
	}
	return nil
}

// uploadAll sends every changed file to its temporary name, with its mode
// and mtime already set so that the rename is all that is left: many files
// as one tar stream where the host can take it, else one SFTP transfer
// each.
// written is called once every file's content has arrived (and was
// checked unchanged locally), before the last modes and mtimes are set;
// not at all when an upload fails first.
func (up *uploader) uploadAll(ctx context.Context, p *plan, written func()) error {
	if up.pre != nil {
		return up.uploadRest(ctx, p, written)
	}
	if up.streams(p) {
		fallback, err := up.streamAll(ctx, up.fs.(extractor), p)
		if !fallback {
			return err
		}
		up.report(func(pr *Progress) { pr.FilesDone, pr.BytesDone = 0, 0 })
		up.result(func(r *Result) { r.FilesSent, r.BytesSent = 0, 0 })
	}
	if len(p.send) >= probeMin {
		up.createMode = up.probeCreateMode()
	}
	arrived := countdown(len(p.send), written)
	return forEach(ctx, len(p.send), up.opts.concurrency(), func(ctx context.Context, i int) error {
		return up.upload(ctx, p.send[i], up.remote(tmpName(i)), arrived)
	})
}

// streams says whether uploadAll sends p's files as one tar stream.
func (up *uploader) streams(p *plan) bool {
	_, ok := up.fs.(extractor)
	return ok && len(p.send) >= streamMin
}

// upload sends one file to tmp and sets its mode and mtime; arrived is
// called between the two, once the content is there.
func (up *uploader) upload(ctx context.Context, f *File, tmp string, arrived func()) error {
	src, done, err := up.tree.openSource(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	w, err := up.fs.Create(tmp)
	if err != nil {
		return fileErr("upload", f.Path, err)
	}
	r := &sendReader{ctx: ctx, r: src, size: f.Size, t: up.tally}
	_, err = io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fileErr("upload", f.Path, err)
	}
	if err := checkUnchanged(src, f, r.n); err != nil {
		return err
	}
	arrived()
	// Mode and mtime are independent requests: one round trip for both.
	err = parallel(
		func() error {
			if f.Mode == up.createMode {
				return nil
			}
			if err := up.fs.Chmod(tmp, f.Mode); err != nil {
				return fileErr("set mode of", f.Path, err)
			}
			return nil
		},
		func() error {
			if err := up.fs.Chtimes(tmp, f.ModTime, f.ModTime); err != nil {
				return fileErr("set mtime of", f.Path, err)
			}
			return nil
		},
	)
	if err != nil {
		return err
	}
	up.sent()
	return nil
}

// sendReader counts bytes for progress and stops on cancellation. Size
// lets the SFTP client pipeline writes as it does for an *os.File.
type sendReader struct {
	ctx  context.Context
	r    io.Reader
	size int64
	n    int64
	t    *tally
}

func (r *sendReader) Size() int64 { return r.size }

func (r *sendReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(b)
	if n > 0 {
		r.n += int64(n)
		r.t.sentBytes(int64(n))
	}
	return n, err
}

// probeMin is the upload size (in files) from which a push learns the
// host's mode for new files first: three requests once, to save one per
// file (of the six an upload takes) on the files that already get it.
const probeMin = 32

// probeCreateMode creates, stats and removes an empty file in tmpDir and
// returns the mode it got, or zero when any step fails.
func (up *uploader) probeCreateMode() fs.FileMode {
	name := up.remote(path.Join(tmpDir, "mode-probe"))
	if err := createWith(up.fs, name, nil); err != nil {
		return 0
	}
	info, err := up.fs.Lstat(name)
	if rerr := up.fs.Remove(name); err != nil || rerr != nil {
		return 0
	}
	return info.Mode().Perm()
}

// tmpName is the temporary name of the i-th upload: short, and unique
// within the push's own upload directory whatever the file's path.
func tmpName(i int) string { return path.Join(tmpDir, fmt.Sprintf("f%06d", i)) }

// preUpload is what a push sends before guard has the listing of the
// host's tree (VerifyStat): the files the manifest says changed, which
// need none of it (nor do the commit's state files, staged beside them:
// committer.stageEarly). The listing takes about four round trips
// (open, read, read, close), as long as the upload (create, write, close),
// so a restart after an edit waits for one of them, not both. Anything
// the listing adds (a file drifted on the host) is sent after, and the
// journal staged again if it then lists more. The uploads land in the
// push's own upload directory, which nothing but a commit moves out: a
// push that stops before leaves the tree as it was, as ever.
type preUpload struct {
	send   []*File       // uploaded to tmpName(i), mode and mtime set
	landed chan struct{} // closed once all of their content is there
	done   chan struct{} // closed once the uploads ended; err says how
	err    error
}

// wait waits for the uploads the preUpload started.
func (e *preUpload) wait() { <-e.done }

// early says whether the push uploads before guard (preUpload): when
// it verifies by listing, the host's manifest named the changes, and the
// upload directory is new and empty. Only a few files, which go over
// SFTP: a stream (or the probe of the mode of new files) is decided on
// the whole of what is sent.
func (up *uploader) early(p *plan) bool {
	return up.opts.Verify != VerifyNone && !up.newWorkdir && p.known && p.madeTmp &&
		len(p.send) > 0 && len(p.send) < min(streamMin, probeMin)
}

// startEarly starts the preUpload of p (up.pre), copying what it sends:
// guard rewrites p.
func (up *uploader) startEarly(ctx context.Context, p *plan) {
	e := &preUpload{send: append([]*File(nil), p.send...), landed: make(chan struct{}), done: make(chan struct{})}
	up.pre = e
	var total int64
	for _, f := range e.send {
		total += f.Size
	}
	up.report(func(pr *Progress) { pr.FilesTotal, pr.BytesTotal = len(e.send), total })
	arrived := countdown(len(e.send), func() { close(e.landed) })
	go func() {
		defer close(e.done)
		e.err = forEach(ctx, len(e.send), up.opts.concurrency(), func(ctx context.Context, i int) error {
			return up.upload(ctx, e.send[i], up.remote(tmpName(i)), arrived)
		})
	}()
}

// uploadRest sends what guard added to the preUpload's files, after them
// (tmpName(len(pre.send)+j)), and sets p.tmp to where each of p.send
// waits; written is called once all of their content is there.
func (up *uploader) uploadRest(ctx context.Context, p *plan, written func()) error {
	early := make(map[string]string, len(up.pre.send))
	for i, f := range up.pre.send {
		early[f.Path] = tmpName(i)
	}
	p.tmp = make([]string, len(p.send))
	var rest []int
	for i, f := range p.send {
		if t, ok := early[f.Path]; ok {
			p.tmp[i] = t
			continue
		}
		p.tmp[i] = tmpName(len(up.pre.send) + len(rest))
		rest = append(rest, i)
	}
	// written once every upload's content is there, the early ones'
	// and the rest's: len(rest)+1 arrivals.
	arrived := countdown(len(rest)+1, written)
	return parallel(
		func() error {
			select {
			case <-up.pre.landed:
				arrived()
				<-up.pre.done
			case <-up.pre.done:
				if up.pre.err == nil { // landed too
					arrived()
				}
			}
			return up.pre.err
		},
		func() error {
			return forEach(ctx, len(rest), up.opts.concurrency(), func(ctx context.Context, j int) error {
				i := rest[j]
				return up.upload(ctx, p.send[i], up.remote(p.tmp[i]), arrived)
			})
		},
	)
}

// mkdirsEarly creates the tree's directories while the files upload, in
// a push into a new workdir (p.dirsMade), rather than after the mark: their
// round trips (one per level, mkdirs) then overlap the upload's three.
// Only there: the workdir holds nothing of the tree (look), so a push that
// stops before its commit leaves at most empty directories, and removes
// them when it can (removeDirs); a next push owns them, or leaves them as
// it leaves a job'up. Not before a stream, which moves new directories in
// whole.
func (up *uploader) mkdirsEarly(ctx context.Context, p *plan) error {
	if !p.dirsMade {
		return nil
	}
	return up.mkdirs(ctx, p.mkdirs)
}
