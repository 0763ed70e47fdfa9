package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// Sharded checkpoints (checkpoint_layout = "sharded"): every host of the
// group writes its own part of each checkpoint into a directory of the
// same name in its checkpoint_dir (torch.distributed.checkpoint writes
// __<rank>_0.distcp per rank and, on the coordinator once every shard is
// written, .metadata). The record keeps one entry per checkpoint whose
// Parts are the hosts that wrote one; drover copies each part to
// checkpoint_copies-1 other hosts (<own>/<seq>/parts/<writer>), so that
// any one lost host can be rebuilt, and before an attempt puts every part
// on every host of the new group and builds there the union of all parts,
// <own>/<seq>/<name>, out of symbolic links to the parts: that directory
// is DROVER_RESUME_FROM, whatever the world size (a resharded load reads
// other ranks' shards too). A checkpoint one of whose parts no host of
// the group holds any more is never resumed from; the one before it is.

// replicateParts copies every part of sharded checkpoint seq written by a
// host of the group to checkpoint_copies-1 other hosts, the ones after
// its writer in the group's order.
func (m *Manager) replicateParts(ctx context.Context, seq int, hosts []Host, set Settings) error {
	var e Entry
	for _, x := range m.rec.Entries() {
		if x.Seq == seq {
			e = x
		}
	}
	var errs []error
	for i, h := range hosts {
		l, ok := e.holder(Written, h.Name)
		if !ok {
			continue
		}
		targets := partTargets(e, hosts, i, set.Copies)
		if len(targets) == 0 {
			continue
		}
		j := directJob{src: h, srcPath: l.Path, seq: seq, name: e.Name, part: h.Name, rate: set.CopyRate, low: h.CopyFS != nil}
		if _, err := m.copyPart(ctx, e, j, targets, set); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// partTargets are the hosts after hosts[i] in the group's order that
// should get a copy of its part: as many as copies-1 asks, less those
// that hold one.
func partTargets(e Entry, hosts []Host, i, copies int) []Host {
	part := hosts[i].Name
	need := copies - 1
	for _, l := range e.Held {
		if l.Kind == Copy && l.Part == part {
			need--
		}
	}
	var out []Host
	for k := 1; k < len(hosts) && need > 0; k++ {
		h := hosts[(i+k)%len(hosts)]
		if !holdsPart(e, part, h.Name) {
			out = append(out, h)
			need--
		}
	}
	return out
}

// holdsPart reports whether host holds part of e: as written (its own
// part) or as drover's copy.
func holdsPart(e Entry, part, host string) bool {
	_, ok := partOn(e, part, host)
	return ok
}

// partOn is where host holds part of e.
func partOn(e Entry, part, host string) (Location, bool) {
	for _, l := range e.Held {
		if l.Host == host && ((l.Kind == Written && host == part) || (l.Kind == Copy && l.Part == part)) {
			return l, true
		}
	}
	return Location{}, false
}

// copyPart copies one part onto targets: host to host where the agents
// can, the rest through the controller. It returns the hosts that hold
// it now.
func (m *Manager) copyPart(ctx context.Context, e Entry, j directJob, targets []Host, set Settings) ([]string, error) {
	start := m.now()
	sent := m.sendDirect(ctx, e, j, targets, set)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var to, direct []string
	var size int64
	var dests []*dest
	for _, h := range targets {
		if d, ok := sent[h.Name]; ok {
			to, direct, size = append(to, h.Name), append(direct, h.Name), d.size
			continue
		}
		fsys := h.FS
		if j.low {
			fsys = h.copyFS()
		}
		dests = append(dests, newPartDest(h, fsys, e.Seq, j.part, e.Name))
	}
	if len(dests) > 0 {
		srcFS := j.src.FS
		if j.low {
			srcFS = j.src.copyFS()
		}
		digest, n, err := copyEntry(ctx, srcFS, j.src.Name+":"+j.srcPath, j.srcPath, e.Name, dests, newLimiter(j.rate, realClock{}), m.idle)
		if err != nil {
			return to, err
		}
		size = n
		for _, d := range dests {
			if d.err != nil {
				m.events("copy of %s's part of checkpoint %s (#%d): %v", j.part, e.Name, e.Seq, d.err)
				continue
			}
			if err := m.rec.AddPart(e.Seq, d.loc, digest, n); err != nil {
				return to, err
			}
			to = append(to, d.label)
			m.prune(d.fs, d.label, Copy, d.label, d.own, set.Keep, e.Seq)
		}
	}
	m.events("%s's part of checkpoint %s (#%d, %s) copied to %v in %s%s", j.part, e.Name, e.Seq, human(size), to,
		m.now().Sub(start).Round(time.Millisecond), hostToHost(direct))
	return to, nil
}

// partSources is, for each part of e, where a host of the group holds
// it: the writer's own first. ok is false, with the parts lost, when some
// part is on no host of the group.
func partSources(e Entry, hosts []Host) (map[string]Host, map[string]Location, []string) {
	srcHost, srcLoc := map[string]Host{}, map[string]Location{}
	var lost []string
	for _, p := range e.Parts {
		found := false
		for _, first := range []bool{true, false} {
			for _, h := range hosts {
				if found || (h.Name == p) != first {
					continue
				}
				if l, ok := partOn(e, p, h.Name); ok {
					srcHost[p], srcLoc[p], found = h, l, true
				}
			}
		}
		if !found {
			lost = append(lost, p)
		}
	}
	return srcHost, srcLoc, lost
}

// stageParts puts every part of sharded checkpoint e on every host of the
// group and builds the union there; nil paths when some part is held by
// no host of the group (the caller then tries the checkpoint before).
func (m *Manager) stageParts(ctx context.Context, e Entry, hosts []Host, set Settings) (map[string]string, error) {
	srcHost, srcLoc, lost := partSources(e, hosts)
	if len(lost) > 0 {
		m.events("checkpoint %s (#%d) is not resumed from: no host of the group holds the part %s wrote", e.Name, e.Seq, strings.Join(lost, ", "))
		return nil, nil
	}
	start := m.now()
	var staged []string
	for _, p := range e.Parts {
		var lacking []Host
		for _, h := range hosts {
			if !holdsPart(e, p, h.Name) {
				lacking = append(lacking, h)
			}
		}
		if len(lacking) == 0 {
			continue
		}
		j := directJob{src: srcHost[p], srcPath: srcLoc[p].Path, seq: e.Seq, name: e.Name, part: p}
		to, err := m.copyPart(ctx, e, j, lacking, set)
		if err != nil {
			return nil, fmt.Errorf("stage %s's part of checkpoint %s (#%d): %w", p, e.Name, e.Seq, err)
		}
		if len(to) < len(lacking) {
			return nil, fmt.Errorf("stage %s's part of checkpoint %s (#%d): only %v of %d hosts got it", p, e.Name, e.Seq, to, len(lacking))
		}
		staged = append(staged, fmt.Sprintf("%s's part onto %s", p, strings.Join(to, ", ")))
	}
	e = m.entry(e.Seq)
	paths := map[string]string{}
	for _, h := range hosts {
		u, err := buildUnion(e, h)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s (#%d) on %s: %w", e.Name, e.Seq, h.Name, err)
		}
		paths[h.Name] = u
	}
	what := "every part already on every host"
	if len(staged) > 0 {
		what = "staged " + strings.Join(staged, "; ")
	}
	m.events("resuming from sharded checkpoint %s (#%d, seen %s, parts of %s): %s; %s in %s", e.Name, e.Seq, e.Seen.Format(time.RFC3339),
		strings.Join(e.Parts, ", "), where(hosts, paths), what, m.now().Sub(start).Round(time.Millisecond))
	return paths, nil
}

func (m *Manager) entry(seq int) Entry {
	for _, e := range m.rec.Entries() {
		if e.Seq == seq {
			return e
		}
	}
	return Entry{}
}

// buildUnion makes <own>/<seq>/<name> on h a directory of symbolic links
// to every file of every part h holds, and returns its path. Only files
// are linked (never a directory), so removing an old union removes links,
// never what they point to.
func buildUnion(e Entry, h Host) (string, error) {
	u := path.Join(h.Own, seqDir(e.Seq), e.Name)
	if err := h.FS.RemoveAll(u); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := h.FS.MkdirAll(u, 0o700); err != nil {
		return "", err
	}
	for _, p := range e.Parts {
		l, ok := partOn(e, p, h.Name)
		if !ok {
			return "", fmt.Errorf("no copy of %s's part", p)
		}
		if err := linkTree(h, l.Path, u); err != nil {
			return "", fmt.Errorf("link %s's part into %s: %w", p, u, err)
		}
	}
	return u, nil
}

// linkTree links every regular file under src into dst, the same
// relative path; a name two parts share keeps the first part's file.
func linkTree(h Host, src, dst string) error {
	kids, err := h.FS.ReadDir(src)
	if err != nil {
		return err
	}
	for _, k := range kids {
		s, d := path.Join(src, k.Name()), path.Join(dst, k.Name())
		switch {
		case k.IsDir():
			if err := h.FS.MkdirAll(d, 0o700); err != nil {
				return err
			}
			if err := linkTree(h, s, d); err != nil {
				return err
			}
		case k.Mode().IsRegular():
			if _, err := h.FS.Lstat(d); err == nil {
				continue
			}
			if err := h.FS.Symlink(s, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// partsStatus says which hosts hold which part of a sharded checkpoint, and
// whether every part is held somewhere (`drover checkpoints`).
func partsStatus(e Entry) string {
	var lost []string
	for _, p := range e.Parts {
		held := slices.ContainsFunc(e.Held, func(l Location) bool {
			return (l.Kind == Written && l.Host == p) || (l.Kind == Copy && l.Part == p)
		})
		if !held {
			lost = append(lost, p)
		}
	}
	if len(lost) > 0 {
		return fmt.Sprintf("%d parts, %s's lost: not recoverable", len(e.Parts), strings.Join(lost, ", "))
	}
	return fmt.Sprintf("%d parts, each held: recoverable", len(e.Parts))
}
