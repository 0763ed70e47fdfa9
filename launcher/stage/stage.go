package stage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
)

// Options tune a staging.
type Options struct {
	// Verify rehashes every file of every destination (--verify).
	Verify bool
	// Rate caps reading each data set from its source (data_copy_rate),
	// in bytes per second; 0 is no cap.
	Rate int64
	// Events receives a line per step, per host and batch received, and
	// per host every ProgressEvery while a batch is in flight; Stage
	// calls it one line at a time.
	Events func(format string, args ...any)
	// ProgressEvery replaces how often a batch in flight reports each
	// host's bytes received (progressEvery).
	ProgressEvery time.Duration
	// MaxBatchBytes and MaxBatchFiles replace the package's limits
	// (tests).
	MaxBatchBytes int64
	MaxBatchFiles int
}

// Result is what one data set's staging did on one host.
type Result struct {
	Set       string
	Host      string
	Files     int   // files sent
	Bytes     int64 // their size
	Unchanged int   // files left as they were
}

// entry is the name every batch travels under in the direct stream.
const entry = "data"

// Stage stages every data set of sets onto every host of dests. Sources
// named "HOST:PATH" must be hosts of dests or others. It returns a
// Result per data set and destination host, and stops at the first data
// set that fails.
func Stage(ctx context.Context, sets []config.DataSet, dests, others []Host, o Options) ([]Result, error) {
	if o.Events == nil {
		o.Events = func(string, ...any) {}
	}
	var mu sync.Mutex
	events := o.Events
	o.Events = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		events(format, args...)
	}
	var out []Result
	for i, d := range sets {
		s := &setStage{o: o, set: d, label: d.Label(i), dests: dests}
		if err := s.resolveSource(ctx, append(slices.Clone(dests), others...)); err != nil {
			return out, err
		}
		res, err := s.run(ctx)
		out = append(out, res...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// setStage is the staging of one data set.
type setStage struct {
	o     Options
	set   config.DataSet
	label string
	dests []Host
	// src is the source host (nil: the source is local) and root the
	// source's absolute path; list its files.
	src  *Host
	root string
	list Listing
}

func (s *setStage) resolveSource(ctx context.Context, hosts []Host) error {
	if s.set.Local() {
		s.root = s.set.Source
		l, err := listLocal(s.root)
		s.list = l
		return err
	}
	for i := range hosts {
		if hosts[i].Name == s.set.SourceHost {
			s.src = &hosts[i]
			break
		}
	}
	if s.src == nil {
		return fmt.Errorf("%s: its source host %s is not connected (not in this group); stage it with drover stage, or make %s part of the run", s.label, s.set.SourceHost, s.set.SourceHost)
	}
	s.root = hostio.Abs(s.src.Home, s.set.Source)
	if ok, err := exists(*s.src, s.root); err != nil || !ok {
		return errors.Join(err, fmt.Errorf("%s: the source %s is not on %s; check source in the job file", s.label, s.root, s.src.Name))
	}
	var err error
	s.list, err = list(ctx, *s.src, s.root)
	return err
}

func (s *setStage) source() string {
	if s.src == nil {
		return s.root
	}
	return s.src.Name + ":" + s.root
}

func (s *setStage) dest(h Host) string { return plan.DataDest(h.Workdir, s.set.Dest, h.Home) }

// states reads every destination host's state at once; a host whose
// destination is the source itself is left out.
func (s *setStage) states(ctx context.Context, hosts []Host) ([]HostState, []Host, error) {
	var todo []Host
	for _, h := range hosts {
		if s.src != nil && h.Name == s.src.Name && s.dest(h) == s.root {
			continue
		}
		todo = append(todo, h)
	}
	states := make([]HostState, len(todo))
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, h := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = state(ctx, h, s.dest(h), s.o.Verify)
		}()
	}
	wg.Wait()
	return states, todo, errors.Join(errs...)
}

func (s *setStage) run(ctx context.Context) ([]Result, error) {
	states, hosts, err := s.states(ctx, s.dests)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.label, err)
	}
	p := MakePlan(s.list, states, s.o.Verify, s.o.MaxBatchBytes, s.o.MaxBatchFiles)
	if errs := CheckSpace(s.list, states, p); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", s.label, errors.Join(errs...))
	}
	if s.src == nil && len(p.Batches) > 0 {
		// A local source goes to one host once; the others get it from
		// there.
		first := hostByName(hosts, p.Batches[0].Hosts[0])
		if err := s.upload(ctx, first, states, p.Need[first.Name]); err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		res := s.result(p, first.Name)
		s.src, s.root = &first, s.dest(first)
		rest, err := s.run(ctx)
		return append([]Result{res}, rest...), err
	}
	s.o.Events("%s: %s: %d files, %s; %s", s.label, s.source(), len(s.list), HumanBytes(s.list.Total()), s.summary(p, hosts))
	byName := map[string]*HostState{}
	for i := range states {
		byName[states[i].Name] = &states[i]
	}
	for bi, b := range p.Batches {
		if err := s.batch(ctx, hosts, byName, bi+1, len(p.Batches), b); err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
	}
	var out []Result
	for _, h := range hosts {
		out = append(out, s.result(p, h.Name))
	}
	return out, nil
}

func (s *setStage) result(p Plan, host string) Result {
	return Result{Set: s.label, Host: host, Files: len(p.Need[host]), Bytes: s.list.Bytes(p.Need[host]), Unchanged: p.Unchanged[host]}
}

// summary says what each host receives.
func (s *setStage) summary(p Plan, hosts []Host) string {
	var parts []string
	for _, h := range hosts {
		if n := len(p.Need[h.Name]); n > 0 {
			parts = append(parts, fmt.Sprintf("%s gets %d (%s)", h.Name, n, HumanBytes(s.list.Bytes(p.Need[h.Name]))))
		} else {
			parts = append(parts, h.Name+" has it")
		}
	}
	return strings.Join(parts, ", ")
}

// batch sends one batch along its chain and moves it into place on every
// host that received it whole.
func (s *setStage) batch(ctx context.Context, hosts []Host, states map[string]*HostState, seq, of int, b Batch) error {
	sendPath := s.root
	if len(b.Files) != len(s.list) {
		out := path.Join(s.src.Workdir, ".drover", "stage-out", strconv.Itoa(seq))
		_ = s.src.FS.RemoveAll(out)
		if err := farm(ctx, *s.src, s.root, out, b.Files); err != nil {
			return err
		}
		defer func() { _ = s.src.FS.RemoveAll(out) }()
		sendPath = out
	}
	var dests []checkpoint.Host
	var receivers []Host
	for _, name := range b.Hosts {
		h := hostByName(hosts, name)
		dests = append(dests, h.copyHost(Area(s.dest(h))))
		receivers = append(receivers, h)
	}
	start := time.Now()
	stop := s.watchBatch(ctx, receivers, seq, of, b)
	done, why := checkpoint.Chain(ctx, s.src.copyHost(""), sendPath, seq, entry, dests, s.o.Rate, s.o.Events)
	stop()
	errs := []error{why}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range done {
		h := hostByName(hosts, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.commit(ctx, h, states[name], seq, b.Files)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			s.o.Events("%s: %s: batch %d/%d: %d files, %s in %s", s.label, name, seq, of, len(b.Files), HumanBytes(b.Bytes), time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	if len(done) < len(b.Hosts) {
		errs = append(errs, fmt.Errorf("batch %d/%d reached %d of %d hosts (%s)", seq, of, len(done), len(b.Hosts), strings.Join(b.Hosts, ", ")))
	}
	return errors.Join(errs...)
}

// readBatchSums reads a received batch's MANIFEST: each file's sha256,
// as the stream checked it, by its path under the data set.
func readBatchSums(h Host, batch string) (map[string]string, error) {
	b, err := hostio.ReadSmall(h.FS, path.Join(batch, checkpoint.ManifestName), maxManifestFile)
	if err != nil {
		return nil, fmt.Errorf("read the MANIFEST of batch %s on %s: %w", batch, h.Name, err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		j := strings.LastIndexByte(line[:max(i, 0)], ' ')
		if i < 0 || j < 0 {
			return nil, fmt.Errorf("the MANIFEST of batch %s on %s has line %q", batch, h.Name, line)
		}
		rel, err := strconv.Unquote(line[:j])
		if err != nil {
			return nil, fmt.Errorf("the MANIFEST of batch %s on %s has line %q: %w", batch, h.Name, line, err)
		}
		sums[strings.TrimPrefix(rel, entry+"/")] = line[i+1:]
	}
	return sums, nil
}

// upload sends a local source's files that h needs straight into dest
// there (through a temporary name in the stage area, then renamed), and
// writes its manifest.
func (s *setStage) upload(ctx context.Context, h Host, states []HostState, files []string) error {
	dest := s.dest(h)
	var st *HostState
	for i := range states {
		if states[i].Name == h.Name {
			st = &states[i]
		}
	}
	tmp := path.Join(Area(dest), "upload")
	if err := h.FS.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("create %s on %s: %w", tmp, h.Name, err)
	}
	s.o.Events("%s: %s: uploading %d files (%s) to %s; the other hosts get them from there", s.label, s.root, len(files), HumanBytes(s.list.Bytes(files)), h.Name)
	received := map[string]string{}
	for _, rel := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum, err := uploadFile(h, filepath.Join(s.root, filepath.FromSlash(rel)), path.Join(tmp, "f"), path.Join(dest, rel), s.list[rel].MTime)
		if err != nil {
			return err
		}
		received[rel] = sum
		if len(received)%1000 == 0 {
			st.Manifest = Update(st.Manifest, s.list, received)
			if err := writeManifest(h, dest, s.source(), st.Manifest); err != nil {
				return err
			}
		}
	}
	st.Manifest = Update(st.Manifest, s.list, received)
	return writeManifest(h, dest, s.source(), st.Manifest)
}

func uploadFile(h Host, local, tmp, to string, mtime int64) (string, error) {
	f, err := os.Open(local)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", local, err)
	}
	defer f.Close()
	w, err := h.FS.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("write %s on %s: %w", tmp, h.Name, err)
	}
	sum := sha256.New()
	_, err = io.Copy(io.MultiWriter(w, sum), f)
	if err := errors.Join(err, w.Close()); err != nil {
		return "", fmt.Errorf("upload %s to %s: %w", local, h.Name, err)
	}
	if err := h.FS.MkdirAll(path.Dir(to), 0o755); err != nil {
		return "", fmt.Errorf("create %s on %s: %w", path.Dir(to), h.Name, err)
	}
	if err := h.FS.Rename(tmp, to); err != nil {
		return "", fmt.Errorf("move %s into place on %s: %w", to, h.Name, err)
	}
	mt := time.Unix(mtime, 0)
	if err := h.FS.Chtimes(to, mt, mt); err != nil {
		return "", fmt.Errorf("set the mtime of %s on %s: %w", to, h.Name, err)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// listLocal lists a local source's regular files.
func listLocal(root string) (Listing, error) {
	l := Listing{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		l[filepath.ToSlash(rel)] = File{Size: fi.Size(), MTime: fi.ModTime().Unix()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the local data set %s: %w", root, err)
	}
	return l, nil
}

func hostByName(hosts []Host, name string) Host {
	for _, h := range hosts {
		if h.Name == name {
			return h
		}
	}
	return Host{Name: name}
}
