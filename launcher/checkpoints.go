package launcher

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/stage"
)

// LogRoot is the directory of a job's runs (RunOptions.LogDir, default
// runs/ next to the job file); the checkpoint record lives there too.
func LogRoot(cfg *config.Config, logDir string) string {
	if logDir != "" {
		return logDir
	}
	return filepath.Join(filepath.Dir(cfg.Path), "runs")
}

// The supervisor's seam into checkpoint replication (package checkpoint):
// stage before an attempt, watch while it runs.

// ckptPhase stages the newest checkpoint on every host beside the push
// (its resume paths feed the final plan), copies the checkpoints while
// the group runs (watch), and tells the crash-loop breaker whether a
// failed attempt made progress (noteResumed, checkProgress).
type ckptPhase struct {
	phaseEnv
	now func() time.Time
	// record is the run's checkpoint record of a job
	// (runner.checkpointRecord).
	record func(job string) (*checkpoint.Record, error)
	// progress is the attempt's, which the breaker judges.
	progress *attemptProgress
	// resume is, per host, the DROVER_RESUME_FROM that staging found.
	resume map[string]string
	// fresh is drover run --fresh; since is the run's first seq of the
	// record it may resume from (0 until the first attempt started over,
	// see checkpoint.StartOver), kept by the runner across
	// attempts; runID names what is set aside.
	fresh bool
	since *int
	runID string
	// runDir is this run's log directory: the others beside it are the
	// earlier runs a resumed checkpoint is named after.
	runDir string
}

func (p *ckptPhase) name() string { return "checkpoint" }

func (p *ckptPhase) cleanup() {}

func (p *ckptPhase) run(ctx context.Context, st *attemptState) error {
	var err error
	p.resume, err = p.stage(ctx, st.conns)
	return err
}

// checkpoints is this attempt's view of the record, its events prefixed
// with the attempt.
func (p *ckptPhase) checkpoints() (*checkpoint.Manager, error) {
	rec, err := p.record(p.cfg.Job.Name)
	if err != nil {
		return nil, err
	}
	events := func(format string, args ...any) {
		p.events.printf(p.prefix()+": "+format, args...)
	}
	return checkpoint.New(rec, events, p.now), nil
}

func (p *ckptPhase) checkpointSettings() checkpoint.Settings {
	j := p.cfg.Job
	return checkpoint.Settings{Marker: j.CheckpointMarker, Copies: j.CheckpointCopies, Keep: j.CheckpointKeep,
		Mirror: j.CheckpointMirror, CopyRate: j.CheckpointCopyRate, Layout: j.CheckpointLayout}
}

func (p *ckptPhase) checkpointHosts(conns []*attemptHost) []checkpoint.Host {
	hosts := make([]checkpoint.Host, len(conns))
	for i, c := range conns {
		wd := remoteAbs(c.home, c.host.Workdir)
		hosts[i] = checkpoint.Host{Name: c.host.Name, FS: c.fs, Dir: remoteAbs(wd, p.cfg.Job.CheckpointDir), Own: checkpoint.OwnDir(wd),
			Addr: plan.HostAddress(c.host), Peer: agentPeer{c}}
	}
	return hosts
}

// stage finds the newest checkpoint anywhere and puts it on
// every host: the result is DROVER_RESUME_FROM per host name, nil to start
// from scratch.
func (p *ckptPhase) stage(ctx context.Context, conns []*attemptHost) (map[string]string, error) {
	m, err := p.checkpoints()
	if err != nil {
		return nil, err
	}
	hosts, set := p.checkpointHosts(conns), p.checkpointSettings()
	if p.fresh && p.since != nil && *p.since == 0 {
		if *p.since, err = checkpoint.StartOver(ctx, m, hosts, set, p.runID); err != nil {
			return nil, err
		}
		p.events.printf("%s: starting from scratch (--fresh): no DROVER_RESUME_FROM; drover's copies of older checkpoints set aside under .drover/set-aside/%s on each host, nothing deleted; checkpoint_dir is left as it is",
			p.prefix(), p.runID)
		return nil, nil
	}
	if p.since != nil {
		set.Since = *p.since
	}
	paths, err := m.Stage(ctx, hosts, set)
	if err == nil && paths != nil && p.n == 1 && !p.fresh {
		p.events.printf("%s: resuming %s; drover run --fresh starts over", p.prefix(), resumedFrom(m.Record().Entries(), paths, p.runDir))
	}
	if err == nil && paths == nil && p.n > 1 {
		// Not "starting from scratch": a script may resume from files
		// of its own outside checkpoint_dir, which drover does not see.
		p.events.printf("%s: no checkpoint in checkpoint_dir (%s) on any host nor in drover's copies: every host resumes from nothing drover holds (DROVER_RESUME_FROM is empty); a script that loads files of its own from elsewhere still does",
			p.prefix(), p.cfg.Job.CheckpointDir)
	}
	return paths, err
}

// watch copies checkpoints while the attempt runs, through
// each host's low-priority file access (lowPriorityFS); the returned stop
// must run before the connections close.
func (p *ckptPhase) watch(ctx context.Context, conns []*attemptHost) (stop func()) {
	m, err := p.checkpoints()
	if err != nil {
		p.events.printf("%s: %v; checkpoints are not copied", p.prefix(), err)
		return func() {}
	}
	hosts := p.checkpointHosts(conns)
	copyFS := make([]*lowPriorityFS, len(conns))
	events := func(format string, args ...any) { p.events.printf(p.prefix()+": "+format, args...) }
	for i, c := range conns {
		copyFS[i] = newLowPriorityFS(ctx, c.hostConn, events)
		hosts[i].CopyFS = copyFS[i]
	}
	stopWatch := m.Watch(ctx, hosts, p.checkpointSettings())
	return func() {
		stopWatch()
		var wg sync.WaitGroup
		for _, f := range copyFS {
			wg.Add(1)
			go func() { defer wg.Done(); _ = f.Close() }()
		}
		wg.Wait()
	}
}

// agentPeer runs the ends of direct checkpoint copies (checkpoint.Peer)
// with the drover agent installed over c. Staging runs beside the
// install, so each start first waits for it.
type agentPeer struct{ c *attemptHost }

func (p agentPeer) binary(ctx context.Context) (string, error) {
	select {
	case <-p.c.installed:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if p.c.agent == "" {
		return "", fmt.Errorf("drover's agent is not installed on %s", p.c.host.Name)
	}
	return p.c.agent, nil
}

func (p agentPeer) StartRecv(ctx context.Context, o checkpoint.PeerRecv, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	bin, err := p.binary(ctx)
	if err != nil {
		return nil, err
	}
	return remote.Client{T: p.c.t, Path: bin}.StartRecv(ctx, o, stdin, stdout, stderr)
}

func (p agentPeer) StartSend(ctx context.Context, o checkpoint.PeerSend, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	bin, err := p.binary(ctx)
	if err != nil {
		return nil, err
	}
	return remote.Client{T: p.c.t, Path: bin}.StartSend(ctx, o, stdin, stdout, stderr)
}

// noteResumed records which checkpoint the attempt resumes from, given
// the DROVER_RESUME_FROM paths that staging returned.
func (p *ckptPhase) noteResumed(paths map[string]string) {
	rec, err := p.record(p.cfg.Job.Name)
	if err != nil || len(paths) == 0 {
		return
	}
	for host, path := range paths {
		if e, ok := rec.Holding(host, path); ok {
			p.progress.resumed = &e
			return
		}
	}
}

// checkProgress lists the checkpoints once more after a failed attempt
// that resumed from one, and notes whether a newer one appeared.
func (p *ckptPhase) checkProgress(ctx context.Context, conns []*attemptHost) {
	if p.progress.resumed == nil || p.cfg.Job.MaxRestartsWithoutProgress == 0 {
		return
	}
	m, err := p.checkpoints()
	if err != nil {
		return
	}
	newest, ok, err := m.Newest(ctx, p.checkpointHosts(conns), p.checkpointSettings())
	if err != nil {
		// Unknown: count it as progress rather than stop a run on a
		// listing that failed.
		p.events.printf("%s: listing the checkpoints after the failure: %v", p.prefix(), err)
		p.progress.newer = true
		return
	}
	resumed := *p.progress.resumed
	for _, e := range m.Record().Entries() {
		switch e.Seq {
		case resumed.Seq:
			resumed = e // its digest, if drover has read it since
		case newest.Seq:
			if newest.Digest == "" {
				newest.Digest = e.Digest // a copy that landed after the listing
			}
		}
	}
	p.progress.newer = ok && restart.Advanced(breakerCheckpoint(&resumed), breakerCheckpoint(&newest))
}

// breakerCheckpoint is what the crash-loop breaker compares of e.
func breakerCheckpoint(e *checkpoint.Entry) restart.Checkpoint {
	return restart.Checkpoint{Seq: e.Seq, Name: e.Name, Digest: e.Digest}
}

// The crash-loop breaker (max_restarts_without_progress) is package
// restart's; an attempt notes here what it learns of its progress
// (ckptPhase.noteResumed and checkProgress).

// attemptProgress is what the breaker learns of one attempt.
type attemptProgress struct {
	// ran says the group was started: an attempt that failed during
	// setup neither counts nor breaks a series.
	ran bool
	// resumed is the checkpoint the attempt resumed from; nil for none.
	resumed *checkpoint.Entry
	// newer says a newer checkpoint appeared before the attempt ended.
	newer bool
}

// policy is what the crash-loop breaker (restart.Breaker) needs of p.
func (p attemptProgress) policy() restart.Progress {
	rp := restart.Progress{Ran: p.ran, Newer: p.newer}
	if p.resumed != nil {
		rp.Resumed = p.resumed.Name
	}
	return rp
}

// lowPriorityFS is the file access checkpoint copies go through while an
// attempt trains: an SFTP session to `drover agent sftp --low-priority` on
// the host (agent.SFTPCommand), opened on the first copy, so that an
// attempt that never copies costs nothing. The agent runs at nice 19 and in
// the idle I/O class, which sshd's sftp-server (the transport's own FS)
// cannot be made to. When it cannot be started, copies fall back to the
// transport's FS and an event says so.
type lowPriorityFS struct {
	ctx    context.Context
	t      cluster.Transport
	agent  string
	plain  cluster.FS
	events func(format string, args ...any)

	mu     sync.Mutex
	fs     cluster.FS
	cmd    *cluster.CommandFS
	closed bool
}

func newLowPriorityFS(ctx context.Context, c *hostConn, events func(string, ...any)) *lowPriorityFS {
	return &lowPriorityFS{ctx: ctx, t: c.t, agent: c.agent, plain: c.fs, events: events}
}

func (l *lowPriorityFS) get() cluster.FS {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs != nil {
		return l.fs
	}
	if l.closed {
		return l.plain
	}
	cmd, err := remote.Client{T: l.t, Path: l.agent}.SFTP(l.ctx)
	if err != nil {
		l.events("%v; checkpoint copies on %s run at normal priority", err, l.t.Host().Name)
		l.fs = l.plain
		return l.fs
	}
	l.cmd, l.fs = cmd, cmd
	return l.fs
}

// Close ends the agent's SFTP server, if one was started.
func (l *lowPriorityFS) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.cmd == nil {
		return nil
	}
	return l.cmd.Close()
}

func (l *lowPriorityFS) Stat(p string) (fs.FileInfo, error)  { return l.get().Stat(p) }
func (l *lowPriorityFS) Lstat(p string) (fs.FileInfo, error) { return l.get().Lstat(p) }
func (l *lowPriorityFS) ReadDir(p string) ([]fs.FileInfo, error) {
	return l.get().ReadDir(p)
}
func (l *lowPriorityFS) MkdirAll(p string, perm fs.FileMode) error { return l.get().MkdirAll(p, perm) }
func (l *lowPriorityFS) Mkdir(p string, perm fs.FileMode) error    { return l.get().Mkdir(p, perm) }
func (l *lowPriorityFS) Create(p string) (io.WriteCloser, error)   { return l.get().Create(p) }
func (l *lowPriorityFS) Open(p string) (io.ReadCloser, error)      { return l.get().Open(p) }
func (l *lowPriorityFS) Rename(o, n string) error                  { return l.get().Rename(o, n) }
func (l *lowPriorityFS) Remove(p string) error                     { return l.get().Remove(p) }
func (l *lowPriorityFS) RemoveAll(p string) error                  { return l.get().RemoveAll(p) }
func (l *lowPriorityFS) Chmod(p string, m fs.FileMode) error       { return l.get().Chmod(p, m) }
func (l *lowPriorityFS) Chtimes(p string, a, m time.Time) error    { return l.get().Chtimes(p, a, m) }
func (l *lowPriorityFS) Symlink(t, n string) error                 { return l.get().Symlink(t, n) }
func (l *lowPriorityFS) Readlink(p string) (string, error)         { return l.get().Readlink(p) }
func (l *lowPriorityFS) Home() (string, error)                     { return l.get().Home() }

// resumedFrom names what a run's first attempt resumes: the checkpoint
// staged at paths (host -> DROVER_RESUME_FROM) and the earlier run that
// saw it complete, from the log directories beside runDir
// (<job>-<start>), or that it was found where no earlier run recorded it.
func resumedFrom(entries []checkpoint.Entry, paths map[string]string, runDir string) string {
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		for _, l := range e.Held {
			if l.Host == "" || paths[l.Host] != l.Path {
				continue
			}
			if run := runBefore(runDir, e.Seen); run != "" {
				return fmt.Sprintf("checkpoint %s from run %s", e.Name, run)
			}
			return fmt.Sprintf("checkpoint %s, found in checkpoint_dir (no earlier run of drover recorded it)", e.Name)
		}
	}
	return "a checkpoint of an earlier run"
}

// runBefore is the name of the newest run directory beside runDir (of
// the same job) that started at or before t; "" when there is none, or
// when t is after runDir's own start (this run saw it first).
func runBefore(runDir string, t time.Time) string {
	own := filepath.Base(runDir)
	job, ownAt, ok := cutRunStart(own)
	if !ok || !t.Before(ownAt) {
		return ""
	}
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(runDir), job+"-*"))
	best, bestAt := "", time.Time{}
	for _, d := range dirs {
		name := filepath.Base(d)
		if j, at, ok := cutRunStart(name); ok && j == job && name != own && !at.After(t) && !at.Before(bestAt) {
			best, bestAt = name, at
		}
	}
	return best
}

// cutRunStart splits a run directory's name, <job>-<YYYYMMDD-HHMMSS>
// with an optional -<n> (see openLogs), into the job and the start.
func cutRunStart(name string) (string, time.Time, bool) {
	const layout = "20060102-150405"
	base := name
	if i := strings.LastIndexByte(base, '-'); i > 0 && len(base)-i-1 < 4 {
		if _, err := strconv.Atoi(base[i+1:]); err == nil {
			base = base[:i]
		}
	}
	if len(base) < len(layout)+2 || base[len(base)-len(layout)-1] != '-' {
		return "", time.Time{}, false
	}
	at, err := time.ParseInLocation(layout, base[len(base)-len(layout):], time.Local)
	if err != nil {
		return "", time.Time{}, false
	}
	return base[:len(base)-len(layout)-1], at, true
}

// dataPhase stages the job's [[data]] sets (package stage) onto the
// hosts of the attempt that this run has not staged them onto yet: all of
// them before the first attempt, a spare that replaced a host before the
// attempt it joins. Every connected host may be a source.
type dataPhase struct {
	phaseEnv
	// staged is the run's (runner.dataStaged).
	staged *map[string]bool
}

func (p *dataPhase) name() string { return "data" }

func (p *dataPhase) cleanup() {}

func (p *dataPhase) run(ctx context.Context, st *attemptState) error {
	if len(p.cfg.Data) == 0 {
		return nil
	}
	if *p.staged == nil {
		*p.staged = map[string]bool{}
	}
	var dests, others []stage.Host
	for _, c := range st.conns {
		h := stage.Host{Name: c.host.Name, T: c.t, FS: c.fs, Home: c.home, Workdir: remoteAbs(c.home, c.host.Workdir),
			Addr: plan.HostAddress(c.host), Peer: agentPeer{c}}
		if (*p.staged)[h.Name] {
			others = append(others, h)
		} else {
			dests = append(dests, h)
		}
	}
	if len(dests) == 0 {
		return nil
	}
	_, err := stage.Stage(ctx, p.cfg.Data, dests, others, stage.Options{Rate: p.cfg.Job.DataCopyRate,
		Events: func(format string, args ...any) { p.events.printf(p.prefix()+": "+format, args...) }})
	if err != nil {
		return fmt.Errorf("stage the [[data]] sets: %w (drover stage %s runs it alone)", err, p.cfg.Path)
	}
	for _, h := range dests {
		(*p.staged)[h.Name] = true
	}
	return nil
}
