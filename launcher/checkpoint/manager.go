package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Host is one connected host of an attempt as checkpointing sees it.
type Host struct {
	Name string
	FS   cluster.FS
	// Dir is the absolute checkpoint_dir on the host (the user's).
	Dir string
	// Own is the absolute directory of drover's copies on the host
	// (OwnDir).
	Own string
	// CopyFS, when set, is the file access that copies made while
	// training runs go through, reading on the host that wrote a
	// checkpoint and writing on the others: drover's low-priority SFTP
	// server on the host (agent.SFTPCommand), so that the copy yields to
	// training there. Listing and staging use FS.
	CopyFS cluster.FS
	// Addr is the host's address on the job's network (the one the
	// collective uses) and Peer starts drover's agent there: with both,
	// on this host and the other end, copies go host to host (directCopy)
	// rather than through the controller.
	Addr string
	Peer Peer
}

// copyFS is the file access for copies made while training runs.
func (h Host) copyFS() cluster.FS {
	if h.CopyFS != nil {
		return h.CopyFS
	}
	return h.FS
}

// OwnDir is drover's copy area under a host's absolute workdir.
func OwnDir(workdir string) string { return path.Join(workdir, ".drover", "checkpoints") }

// Settings are the job's checkpoint keys, read again for every attempt.
type Settings struct {
	Marker string
	// Copies is how many hosts should hold each checkpoint; 1 (or less)
	// turns copying off.
	Copies int
	// Keep is how many of its own copies drover keeps per host and in the
	// mirror.
	Keep int
	// Mirror is an absolute directory on the controller, "" for none.
	Mirror string
	// CopyRate, when positive, caps in bytes per second how fast a copy
	// made while training runs reads the checkpoint (checkpoint_copy_rate).
	// Staging, between attempts, is not capped: nothing else runs then.
	CopyRate int64
	// Layout is config.LayoutSharded when every host writes its own part
	// of each checkpoint (see scanParts); anything else is one entry per
	// checkpoint.
	Layout string
	// PollEvery is how often a Watcher lists every host's checkpoint_dir;
	// 0 means DefaultPollEvery.
	PollEvery time.Duration
	// Since, when positive, is the first seq of the record that Stage
	// resumes from: a run started over (StartOver) ignores older ones.
	Since int
}

// Sharded reports whether checkpoints have the sharded layout.
func (s Settings) Sharded() bool { return s.Layout == LayoutSharded }

// LayoutSharded is config.LayoutSharded, the layout whose checkpoints are
// one part per host.
const LayoutSharded = "sharded"

// DefaultPollEvery is how often checkpoint directories are listed while an
// attempt runs: one SFTP readdir per host, cheap next to training.
const DefaultPollEvery = 2 * time.Second

// Manager keeps a job's record and the work on it: staging before an
// attempt, watching and copying during one. One Manager serves a whole
// run.
type Manager struct {
	rec    *Record
	events func(format string, args ...any)
	now    func() time.Time
	mirror cluster.FS

	// idle is the copy streams' idle deadline (CopyIdle when 0; tests
	// shorten it).
	idle time.Duration

	mu sync.Mutex
	// noDirect holds the "src\x00dst" pairs a direct copy could not
	// connect between: they go through the controller from then on.
	noDirect map[string]bool
}

// New returns a Manager over rec. events receives one line per thing the
// user should know (copies, staging, failures); now is the clock of the
// record.
func New(rec *Record, events func(format string, args ...any), now func() time.Time) *Manager {
	if now == nil {
		now = time.Now
	}
	return &Manager{rec: rec, events: events, now: now, mirror: cluster.NewOSFS("/")}
}

// Record is the record the Manager keeps.
func (m *Manager) Record() *Record { return m.rec }

// unscanned are the hosts whose checkpoint_dir could not be listed.
func unscanned(hosts []Host, ok []bool) []string {
	var names []string
	for i, h := range hosts {
		if !ok[i] {
			names = append(names, h.Name)
		}
	}
	return names
}

// scanAll lists every host's checkpoint_dir at once. A host whose listing
// fails is left out of the result (ok[i] false), so that nothing is
// concluded about it. With the sharded layout (scanParts), each host's
// part of a checkpoint is listed once the marker is in any host's part.
func scanAll(ctx context.Context, hosts []Host, set Settings) (found [][]Found, ok []bool, errs []error) {
	if set.Sharded() {
		return scanParts(ctx, hosts, set.Marker)
	}
	return scanEach(ctx, hosts, set.Marker)
}

func scanEach(ctx context.Context, hosts []Host, marker string) (found [][]Found, ok []bool, errs []error) {
	found, ok, errs = make([][]Found, len(hosts)), make([]bool, len(hosts)), make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = Scan(ctx, h.FS, h.Name, h.Dir, marker)
			ok[i] = errs[i] == nil
		}()
	}
	wg.Wait()
	return found, ok, errs
}

// scanParts lists the parts of sharded checkpoints: every host's
// directory of a name whose marker some host's directory holds. Only the
// coordinator writes the marker, and only once every rank's shard is
// written (torch.distributed.checkpoint's .metadata), so the other hosts'
// directories of that name are complete then too.
func scanParts(ctx context.Context, hosts []Host, marker string) ([][]Found, []bool, []error) {
	marked, _, _ := scanEach(ctx, hosts, marker)
	all, ok, errs := scanEach(ctx, hosts, "")
	complete := map[string]bool{}
	for _, fs := range marked {
		for _, f := range fs {
			complete[f.Name] = true
		}
	}
	for i := range all {
		all[i] = slices.DeleteFunc(all[i], func(f Found) bool { return !f.IsDir || !complete[f.Name] })
	}
	return all, ok, errs
}

// reconcile brings the record up to date with what the hosts hold now:
// entries drover has no record of are added (oldest first by their own
// host's clock), and locations on these hosts that are gone are dropped,
// drover's copies among them that no longer match their MANIFEST
// (verifyCopy): staging then sends a whole copy again.
func (m *Manager) reconcile(ctx context.Context, hosts []Host, set Settings) error {
	found, ok, errs := scanAll(ctx, hosts, set)
	var unknown []Found
	for i := range hosts {
		if errs[i] != nil {
			m.events("%v (ignored)", errs[i])
		}
		unknown = append(unknown, found[i]...)
	}
	slices.SortStableFunc(unknown, ByModTime)
	added, err := m.rec.Saw(unknown, m.now())
	if err != nil {
		return err
	}
	if set.Sharded() {
		if err := m.rec.NoteParts(); err != nil {
			return err
		}
		if err := m.rec.ExpectParts(added, unscanned(hosts, ok)); err != nil {
			return err
		}
	}
	present := map[Location]bool{}
	for i, h := range hosts {
		for _, f := range found[i] {
			present[Location{Kind: Written, Host: h.Name, Path: f.Path, Stamp: f.Stamp}] = true
		}
	}
	byName := map[string]int{}
	for i, h := range hosts {
		byName[h.Name] = i
	}
	var gone []seqLoc
	for _, e := range m.rec.Entries() {
		for _, l := range e.Held {
			i, in := byName[l.Host]
			var fsys cluster.FS
			switch {
			case l.Kind == Mirror && set.Mirror == "":
				gone = append(gone, seqLoc{e.Seq, l})
				continue
			case l.Kind == Mirror:
				fsys = m.mirror
			case !in:
				continue
			case l.Kind == Written:
				if ok[i] && !present[l] {
					gone = append(gone, seqLoc{e.Seq, l})
				}
				continue
			default:
				fsys = hosts[i].FS
			}
			digest := e.Digest
			if l.Part != "" {
				digest = e.PartDigests[l.Part]
			}
			if err := verifyCopy(fsys, path.Dir(l.Path), digest); err != nil {
				if !errors.Is(err, errNoCopy) {
					m.events("drover's copy of checkpoint %s (#%d) at %s is damaged: %v; it is not resumed from (staged again where needed)", e.Name, e.Seq, l, err)
				}
				gone = append(gone, seqLoc{e.Seq, l})
			}
		}
	}
	return m.rec.dropAll(gone)
}

// Stage picks the newest checkpoint in the record that these hosts or the
// mirror still hold, copies it onto every host that lacks it, and returns
// the path of it on each host (DROVER_RESUME_FROM), or nil when there is
// no checkpoint to resume from. A failure to stage onto a host is an
// error: processes resuming from different checkpoints would diverge.
func (m *Manager) Stage(ctx context.Context, hosts []Host, set Settings) (map[string]string, error) {
	if err := m.reconcile(ctx, hosts, set); err != nil {
		return nil, err
	}
	entries := m.rec.Entries()
	var lastErr error
	for i := len(entries) - 1; i >= 0 && entries[i].Seq >= set.Since; i-- {
		e := entries[i]
		paths, err := m.stageEntry(ctx, e, hosts, set)
		if err == nil && paths != nil {
			return paths, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			m.events("checkpoint %s (#%d) could not be staged: %v; trying the one before it", e.Name, e.Seq, err)
			lastErr = err
		}
	}
	return nil, lastErr
}

// stageEntry puts e on every host, or returns nil paths when no host of
// the group nor the mirror holds it.
func (m *Manager) stageEntry(ctx context.Context, e Entry, hosts []Host, set Settings) (map[string]string, error) {
	if len(e.Parts) > 0 {
		return m.stageParts(ctx, e, hosts, set)
	}
	paths := map[string]string{}
	var lacking []Host
	var sources []Location
	for _, h := range hosts {
		if l, ok := held(e, h.Name); ok {
			paths[h.Name] = l.Path
			sources = append(sources, l)
		} else {
			lacking = append(lacking, h)
		}
	}
	for _, l := range e.Held {
		if l.Kind == Mirror && set.Mirror != "" {
			sources = append([]Location{l}, sources...) // local disk first
		}
	}
	if len(sources) == 0 {
		return nil, nil
	}
	if len(lacking) == 0 {
		m.events("resuming from checkpoint %s (#%d, seen %s): %s", e.Name, e.Seq, e.Seen.Format(time.RFC3339), where(hosts, paths))
		return paths, nil
	}
	start := m.now()
	var names, direct []string
	srcName, size := "", int64(0)
	if src, h, ok := directSource(sources, hosts); ok {
		sent := m.sendDirect(ctx, e, directJob{src: h, srcPath: src.Path, seq: e.Seq, name: e.Name}, lacking, set)
		lacking = slices.DeleteFunc(lacking, func(h Host) bool {
			d, ok := sent[h.Name]
			if ok {
				paths[h.Name], size, srcName = path.Join(h.Own, seqDir(e.Seq), e.Name), d.size, src.String()
				names, direct = append(names, h.Name), append(direct, h.Name)
			}
			return ok
		})
	}
	if len(lacking) > 0 {
		var err error
		if srcName, size, err = m.stageRelay(ctx, e, sources, hosts, lacking, set, paths, &names); err != nil {
			return nil, err
		}
	}
	m.events("resuming from checkpoint %s (#%d, seen %s): %s; staged %s from %s onto %s in %s%s", e.Name, e.Seq,
		e.Seen.Format(time.RFC3339), where(hosts, paths), human(size), srcName, strings.Join(names, ", "), m.now().Sub(start).Round(time.Millisecond), hostToHost(direct))
	return paths, nil
}

// directSource is the first source of sources on a host of the group
// whose agent can send, and that host.
func directSource(sources []Location, hosts []Host) (Location, Host, bool) {
	for _, l := range sources {
		for _, h := range hosts {
			if l.Kind != Mirror && h.Name == l.Host && h.Peer != nil {
				return l, h, true
			}
		}
	}
	return Location{}, Host{}, false
}

// stageRelay copies e onto lacking through the controller (stageFrom),
// adding each to paths and names; it returns the source and size.
func (m *Manager) stageRelay(ctx context.Context, e Entry, sources []Location, hosts, lacking []Host, set Settings, paths map[string]string, names *[]string) (string, int64, error) {
	dests, src, digest, size, err := m.stageFrom(ctx, e, sources, hosts, lacking)
	if err != nil {
		return "", 0, err
	}
	for _, d := range dests {
		if d.err != nil {
			return "", 0, d.err
		}
		if err := m.rec.Add(e.Seq, d.loc, digest, size); err != nil {
			return "", 0, err
		}
		paths[d.label] = d.loc.Path
		*names = append(*names, d.label)
		m.prune(d.fs, d.label, Copy, d.label, d.own, set.Keep, e.Seq)
	}
	return src.String(), size, nil
}

// stageFrom copies e onto the lacking hosts from the first of sources
// that gives drover's copy of it back: the checkpoint read from drover's
// copy on a host or in the mirror must have the digest recorded for it,
// and one that does not is dropped from the record and the next source
// tried. (A user's own entry read where it was written is what it is: a
// checkpoint several hosts wrote may differ from host to host.)
func (m *Manager) stageFrom(ctx context.Context, e Entry, sources []Location, hosts, lacking []Host) ([]*dest, Location, string, int64, error) {
	var errs []error
	for _, src := range sources {
		dests := make([]*dest, len(lacking))
		for i, h := range lacking {
			dests[i] = newDest(h.Name, Copy, h.Name, h.FS, h.Own, e.Seq, e.Name)
		}
		digest, size, err := copyEntry(ctx, m.fsOf(src, hosts), src.String(), src.Path, e.Name, dests, nil, m.idle)
		if err == nil && src.Kind != Written && e.Digest != "" && digest != e.Digest {
			err = fmt.Errorf("checkpoint %s (#%d) read from %s does not match the copy drover made of it (sha256 of MANIFEST %s, recorded %s)", e.Name, e.Seq, src, digest, e.Digest)
			if derr := m.rec.Drop(e.Seq, src); derr != nil {
				return nil, src, "", 0, derr
			}
		}
		if err == nil {
			return dests, src, digest, size, nil
		}
		if ctx.Err() != nil {
			return nil, src, "", 0, err
		}
		errs = append(errs, err)
	}
	return nil, Location{}, "", 0, errors.Join(errs...)
}

// where says which path each host resumes from: "P on h0, Q on h1, h2".
func where(hosts []Host, paths map[string]string) string {
	var parts []string
	last := ""
	for _, h := range hosts {
		p := paths[h.Name]
		if p == last && len(parts) > 0 {
			parts[len(parts)-1] += ", " + h.Name
			continue
		}
		// Say whose file each host resumes from: a host resuming from
		// the training's own file and one resuming from drover's copy
		// of it are told apart.
		whose := "its own file "
		if h.Own != "" && strings.HasPrefix(p, strings.TrimSuffix(h.Own, "/")+"/") {
			whose = "drover's copy "
		}
		parts = append(parts, whose+p+" on "+h.Name)
		last = p
	}
	return strings.Join(parts, ", ")
}

// held is e's location on host: the user's own entry, else drover's copy.
func held(e Entry, host string) (Location, bool) {
	if l, ok := e.holder(Written, host); ok {
		return l, true
	}
	return e.holder(Copy, host)
}

func (m *Manager) fsOf(l Location, hosts []Host) cluster.FS {
	if l.Kind == Mirror {
		return m.mirror
	}
	for _, h := range hosts {
		if h.Name == l.Host {
			return h.FS
		}
	}
	return nil
}

// prune applies checkpoint_keep to drover's copies in own, keeping
// protect, and drops what it removed from the record.
func (m *Manager) prune(fsys cluster.FS, label, kind, host, own string, keep, protect int) {
	removed, err := prune(fsys, own, keep, protect)
	if err != nil {
		m.events("remove old checkpoint copies on %s in %s: %v (ignored)", label, own, err)
	}
	for _, seq := range removed {
		for _, e := range m.rec.Entries() {
			if e.Seq != seq {
				continue
			}
			for _, l := range e.Held {
				if l.Kind == kind && l.Host == host && strings.HasPrefix(l.Path, path.Join(own, seqDir(seq))+"/") {
					if err := m.rec.Drop(seq, l); err != nil {
						m.events("%v", err)
					}
				}
			}
		}
	}
}

// human renders a byte count for events and tables.
func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// replicate copies checkpoint seq from a host that wrote it to as many
// other hosts as Copies asks (the hosts after the writer, in the group's
// order, that do not hold it yet) and to the mirror. Hosts go host to
// host where the agents can (directCopy); the rest, and the mirror, go
// through the controller in one read.
func (m *Manager) replicate(ctx context.Context, seq int, hosts []Host, set Settings) error {
	if set.Sharded() {
		return m.replicateParts(ctx, seq, hosts, set)
	}
	e, srcIdx, targets := copyTargets(m.rec.Entries(), seq, hosts, set)
	if srcIdx < 0 {
		return nil // written by a host no longer in the group
	}
	src, _ := e.holder(Written, hosts[srcIdx].Name)
	wantMirror := false
	if set.Mirror != "" {
		_, has := e.holder(Mirror, "")
		wantMirror = !has
	}
	if len(targets) == 0 && !wantMirror {
		return nil
	}
	start := m.now()
	low := hosts[srcIdx].CopyFS != nil
	sent := m.sendDirect(ctx, e, directJob{src: hosts[srcIdx], srcPath: src.Path, seq: seq, name: e.Name, rate: set.CopyRate, low: low}, targets, set)
	if err := ctx.Err(); err != nil {
		return err
	}
	var to, direct []string
	var size int64
	var dests []*dest
	for _, h := range targets {
		if d, ok := sent[h.Name]; ok {
			to, size, direct = append(to, h.Name), d.size, append(direct, h.Name)
			continue
		}
		dests = append(dests, newDest(h.Name, Copy, h.Name, h.copyFS(), h.Own, seq, e.Name))
	}
	if wantMirror {
		dests = append(dests, newDest("mirror", Mirror, "", cluster.NewRootFS(set.Mirror), set.Mirror, seq, e.Name))
	}
	if len(dests) > 0 {
		lim := newLimiter(set.CopyRate, realClock{})
		digest, n, err := copyEntry(ctx, hosts[srcIdx].copyFS(), src.String(), src.Path, e.Name, dests, lim, m.idle)
		if err != nil {
			return err
		}
		size = n
		for _, d := range dests {
			if d.err != nil {
				m.events("copy of checkpoint %s (#%d): %v", e.Name, seq, d.err)
				continue
			}
			if err := m.rec.Add(seq, d.loc, digest, n); err != nil {
				return err
			}
			to = append(to, d.label)
		}
	}
	m.events("checkpoint %s (#%d, %s) copied from %s to %v in %s%s", e.Name, seq, human(size), src.Host, to,
		m.now().Sub(start).Round(time.Millisecond), hostToHost(direct))
	// Old copies go once the event has said where the new one is: the
	// listing and removal are round trips the copy's time does not count.
	for _, d := range dests {
		if d.err == nil {
			m.prune(d.fs, d.label, d.loc.Kind, d.loc.Host, d.own, set.Keep, seq)
		}
	}
	return nil
}

// hostToHost is the end of a copy's event that names the hosts it reached
// directly, not through the controller.
func hostToHost(direct []string) string {
	if len(direct) == 0 {
		return ""
	}
	return " (host to host: " + strings.Join(direct, ", ") + ")"
}

// copyTargets finds checkpoint seq, the index in hosts of a host that
// wrote it (-1 for none) and the hosts it should be copied to: as many as
// Copies asks, the hosts after the writer in the group's order that do
// not hold it yet.
func copyTargets(entries []Entry, seq int, hosts []Host, set Settings) (Entry, int, []Host) {
	var e Entry
	for _, x := range entries {
		if x.Seq == seq {
			e = x
		}
	}
	srcIdx := -1
	holders := map[string]bool{}
	for _, l := range e.Held {
		holders[l.Host] = l.Kind != Mirror
		for i, h := range hosts {
			if l.Kind == Written && h.Name == l.Host && srcIdx < 0 {
				srcIdx = i
			}
		}
	}
	if srcIdx < 0 {
		return e, -1, nil
	}
	need := set.Copies
	for h, isHost := range holders {
		if isHost && h != "" {
			need--
		}
	}
	var targets []Host
	for k := 1; k < len(hosts) && need > 0; k++ {
		h := hosts[(srcIdx+k)%len(hosts)]
		if !holders[h.Name] {
			targets = append(targets, h)
			need--
		}
	}
	return e, srcIdx, targets
}

// sendDirect copies e from src straight to the targets that can take a
// direct copy, records and prunes what arrived, and returns it by host
// name. A target that a direct copy could not reach is left for the
// relay, with one event that says why. One that could not be connected to
// at all is not tried directly again by this Manager (a firewall does not
// open between two checkpoints); one whose copy failed otherwise (a
// stream that stopped moving, a handshake that another user of the host
// held up) is tried directly again at the next checkpoint.
func (m *Manager) sendDirect(ctx context.Context, e Entry, j directJob, targets []Host, set Settings) map[string]directDone {
	src := j.src
	if src.Peer == nil || len(targets) == 0 {
		return nil
	}
	j.idle = m.idle
	var try []Host
	for _, h := range targets {
		if h.Peer != nil && !m.relayOnly(src.Name, h.Name) {
			try = append(try, h)
		}
	}
	if len(try) == 0 {
		return nil
	}
	done, failed, unreachable, why := directCopy(ctx, j, try, m.events)
	out := map[string]directDone{}
	for _, d := range done {
		loc := j.dest(d.host)
		var err error
		if j.part != "" {
			err = m.rec.AddPart(e.Seq, loc, d.digest, d.size)
		} else {
			err = m.rec.Add(e.Seq, loc, d.digest, d.size)
		}
		if err != nil {
			m.events("%v", err)
			continue
		}
		out[d.host.Name] = d
		m.prune(d.host.copyFS(), d.host.Name, Copy, d.host.Name, d.host.Own, set.Keep, e.Seq)
	}
	if len(failed) > 0 && ctx.Err() == nil {
		var names []string
		for _, h := range failed {
			names = append(names, h.Name)
		}
		for _, h := range unreachable {
			m.setRelayOnly(src.Name, h.Name)
		}
		m.events("direct copy of checkpoint %s (#%d) from %s to %s failed (%v); copying through the controller instead", e.Name, e.Seq, src.Name, strings.Join(names, ", "), why)
	}
	return out
}

func (m *Manager) relayOnly(src, dst string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.noDirect[src+"\x00"+dst]
}

func (m *Manager) setRelayOnly(src, dst string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.noDirect == nil {
		m.noDirect = map[string]bool{}
	}
	m.noDirect[src+"\x00"+dst] = true
}
