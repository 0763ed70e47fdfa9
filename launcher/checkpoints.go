package launcher

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/plan"
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

// checkpointRecord loads the job's record once per run.
func (r *runner) checkpointRecord(job string) (*checkpoint.Record, error) {
	r.ckptOnce.Do(func() {
		r.ckptRec, r.ckptErr = checkpoint.LoadRecord(checkpoint.RecordPath(r.logRoot, job), job)
	})
	return r.ckptRec, r.ckptErr
}

// checkpoints is this attempt's view of the record, its events prefixed
// with the attempt.
func (a *attempt) checkpoints() (*checkpoint.Manager, error) {
	rec, err := a.r.checkpointRecord(a.cfg.Job.Name)
	if err != nil {
		return nil, err
	}
	events := func(format string, args ...any) {
		a.r.events.printf(a.prefix()+": "+format, args...)
	}
	return checkpoint.New(rec, events, a.r.now), nil
}

func (a *attempt) checkpointSettings() checkpoint.Settings {
	j := a.cfg.Job
	return checkpoint.Settings{Marker: j.CheckpointMarker, Copies: j.CheckpointCopies, Keep: j.CheckpointKeep,
		Mirror: j.CheckpointMirror, CopyRate: j.CheckpointCopyRate, Layout: j.CheckpointLayout}
}

func (a *attempt) checkpointHosts(conns []*attemptHost) []checkpoint.Host {
	hosts := make([]checkpoint.Host, len(conns))
	for i, c := range conns {
		wd := remoteAbs(c.home, c.host.Workdir)
		hosts[i] = checkpoint.Host{Name: c.host.Name, FS: c.fs, Dir: remoteAbs(wd, a.cfg.Job.CheckpointDir), Own: checkpoint.OwnDir(wd),
			Addr: plan.HostAddress(c.host), Peer: agentPeer{c}}
	}
	return hosts
}

// stageCheckpoint finds the newest checkpoint anywhere and puts it on
// every host: the result is DROVER_RESUME_FROM per host name, nil to start
// from scratch.
func (a *attempt) stageCheckpoint(ctx context.Context, conns []*attemptHost) (map[string]string, error) {
	m, err := a.checkpoints()
	if err != nil {
		return nil, err
	}
	paths, err := m.Stage(ctx, a.checkpointHosts(conns), a.checkpointSettings())
	if err == nil && paths == nil && a.n > 1 {
		// Not "starting from scratch": a script may resume from files
		// of its own outside checkpoint_dir, which drover does not see.
		a.r.events.printf("%s: no checkpoint in checkpoint_dir (%s) on any host nor in drover's copies: every host resumes from nothing drover holds (DROVER_RESUME_FROM is empty); a script that loads files of its own from elsewhere still does",
			a.prefix(), a.cfg.Job.CheckpointDir)
	}
	return paths, err
}

// watchCheckpoints copies checkpoints while the attempt runs, through
// each host's low-priority file access (lowPriorityFS); the returned stop
// must run before the connections close.
func (a *attempt) watchCheckpoints(ctx context.Context, conns []*attemptHost) (stop func()) {
	m, err := a.checkpoints()
	if err != nil {
		a.r.events.printf("%s: %v; checkpoints are not copied", a.prefix(), err)
		return func() {}
	}
	hosts := a.checkpointHosts(conns)
	copyFS := make([]*lowPriorityFS, len(conns))
	events := func(format string, args ...any) { a.r.events.printf(a.prefix()+": "+format, args...) }
	for i, c := range conns {
		copyFS[i] = newLowPriorityFS(ctx, c.hostConn, events)
		hosts[i].CopyFS = copyFS[i]
	}
	stopWatch := m.Watch(ctx, hosts, a.checkpointSettings())
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

// ckptState is the runner's part of checkpointing: the record, loaded once.
type ckptState struct {
	ckptOnce sync.Once
	ckptRec  *checkpoint.Record
	ckptErr  error
	// sharedChanges is the record's change count last written to the
	// hosts (shareCheckpoints).
	sharedChanges int
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
