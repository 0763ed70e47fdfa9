package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/lease"
)

// Re-adoption: `drover run -d JOB` finds on the hosts a detached run whose
// group still runs (its supervisor was SIGKILLed, its machine is asleep
// for good) and takes it over as it is: the same run id, attempt, restart
// count and checkpoint record. It takes the workdir leases as any run does
// (a live supervisor still refuses it, exit 2; --force takes over), then,
// instead of pushing, checking and starting, attaches to every process
// (agent attach) from where this machine's log of it ends, so that each
// line lands in the run's logs once.

// runIDFile, in a detached run's local directory, names its run, so that
// a supervisor adopting it on the same machine appends to its logs.
const runIDFile = "run-id"

// findAdoptable looks on the job's hosts for a detached run that is not
// over and has a live process: nil when there is none. A foreground run
// looks too, when its first attempt's cheap look found a run record that
// is not final (lookForGroup): it adopts such a group rather than stop it
// as a leftover (see controllerTimeout).
func (r *runner) findAdoptable(ctx context.Context, cfg *config.Config) (ad *adoption, answered bool) {
	dial := r.opts.Dial
	dial.Inventory = config.Endpoints(cfg.Hosts)
	views := hostio.ReadViews(ctx, cfg.Hosts, dial, r.agents(), false, 0)
	defer hostio.CloseViews(views)
	ag := hostio.Agree(views)
	answered = len(ag.Unreachable) == 0
	r.noteDissent(ag)
	rec := ag.Run
	if rec == nil || rec.State.Final() {
		return nil, answered
	}
	if rec.Foreground {
		return nil, answered // its agents stop with its supervisor: nothing to adopt
	}
	var alive bool
	var leaseAge float64 = -1
	for _, v := range views {
		if v.Err != nil || v.Report.Run == nil || v.Report.Run.RunID != rec.RunID {
			continue
		}
		for _, p := range v.Report.Processes {
			alive = alive || p.Alive
		}
		if v.Report.Lease != "" && (leaseAge < 0 || v.Report.LeaseAgeS < leaseAge) {
			leaseAge = v.Report.LeaseAgeS
		}
	}
	if !alive {
		return nil, answered
	}
	since := rec.Updated.Local()
	if leaseAge >= 0 {
		since = r.now().Add(-time.Duration(leaseAge * float64(time.Second)))
	}
	return &adoption{rec: *rec, gone: fmt.Sprintf("supervisor %s pid %d gone since %s", rec.SupervisorHost, rec.SupervisorPid, since.Format("15:04:05"))}, answered
}

// noteDissent names, in an event, each host whose report is not the run
// the hosts agree on (it is not followed), or the runs tied when they
// agree on none (none is adopted).
func (r *runner) noteDissent(ag hostio.Agreement) {
	if err := ag.Err(); err != nil {
		r.events.printf("adoption: %v; adopting none", err)
		return
	}
	for _, d := range ag.Dissent {
		r.events.printf("adoption: %s, not run %s that the other hosts agree on: not followed", d, ag.Run.RunID)
	}
}

// lookForGroup is a foreground run's first look for a group to adopt, at
// the price of one command per host, which the first attempt runs beside
// its setup (files, lease, agent) over its own connections: whether any
// host's workdir has a detached run whose record is not final. Only then
// does the run read the hosts in full (findAdoptable), which would cost
// every foreground start an agent check and a report per host. The
// returned wait gives the answer.
func lookForGroup(ctx context.Context, conns []*hostConn) (wait func() bool) {
	// Bounded: a host that does not answer at once (rebooting, cut off)
	// is the attempt's to wait for, as before, not this look's.
	ctx, cancel := context.WithTimeout(ctx, mayAdoptWait)
	found := make([]bool, len(conns))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		_ = forEach(conns, func(c *hostConn) error {
			rec := path.Join(c.host.Workdir, agent.CurrentRun, agent.RunRecordFile)
			out, _, err := remote.Read(ctx, c.t, []string{"cat", rec}, "cat "+rec, remote.RunRecordLimit)
			if err != nil {
				return nil // no run record (or no sane one): nothing to adopt
			}
			var rr agent.RunRecord
			i := slices.Index(conns, c)
			found[i] = json.Unmarshal(out, &rr) == nil && !rr.State.Final() && !rr.Foreground
			return nil
		})
	}()
	return func() bool {
		<-done
		return slices.Contains(found, true)
	}
}

// mayAdoptWait bounds lookForGroup: every host of a run holds its record, so
// the hosts that answer in time are enough to find it.
const mayAdoptWait = 3 * time.Second

// adopt makes this run the adopted one: its id and record, and, when this
// machine has the run's directory, that directory (res.LogDir) instead of
// the new one, so that its logs go on where they stopped.
func (r *runner) adopt(ad *adoption, res *Result) {
	r.runID = ad.rec.RunID
	r.runRec = ad.rec
	r.runRec.SupervisorHost, r.runRec.SupervisorPid, r.runRec.SupervisorVersion = supervisorHost(), os.Getpid(), agent.Version()
	dirs, _ := filepath.Glob(filepath.Join(r.logRoot, "*", runIDFile))
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		old := filepath.Dir(f)
		if err != nil || strings.TrimSpace(string(b)) != ad.rec.RunID || old == res.LogDir {
			continue
		}
		ev, err := os.OpenFile(filepath.Join(old, "events.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		r.events.mu.Lock()
		if r.events.file != nil {
			r.events.file.Close()
		}
		r.events.file = ev
		r.events.mu.Unlock()
		_ = os.RemoveAll(res.LogDir)
		res.LogDir, r.runLogDir = old, old
		return
	}
	_ = os.WriteFile(filepath.Join(res.LogDir, runIDFile), []byte(ad.rec.RunID+"\n"), 0o644)
}

// adoptGroup is an attempt that takes over the adopted run's live group
// instead of starting one: the plan is built as for a start (it names the
// processes and their environment) but nothing is pushed, checked or
// started; every process is attached to (see startOne).
func (a *attempt) adoptGroup(ctx context.Context, st *attemptState) attemptOutcome {
	conns := st.conns
	if err := a.ph.plan.run(ctx, st); err != nil {
		return a.setupFailure(err)
	}
	pl := st.plan
	a.takeSharedCheckpoints(ctx, conns)
	a.r.events.printf("adopting attempt %d of run %s (%s)", a.n, a.r.runID, a.adopt.gone)
	defer a.ph.ckpt.watch(ctx, conns)()
	return a.supervise(ctx, conns, pl)
}

// reattachWait is how often a supervisor that lost its processes looks
// for them again, for up to host_wait.
const reattachEvery = 2 * time.Second

// waitReattach looks for attempt n of this run on the hosts again after
// the supervisor lost it, for up to host_wait: the adoption to attach
// with, or nil when its processes are gone or the hosts stay away.
func (r *runner) waitReattach(ctx context.Context, cfg *config.Config, n int) *adoption {
	deadline := r.now().Add(cfg.Job.HostWait)
	for {
		ad, answered := r.findAdoptable(ctx, cfg)
		if ad != nil && ad.rec.RunID == r.runID && ad.rec.Attempt == n {
			ad.gone = "re-attaching: " + ad.gone
			return ad
		}
		if answered || !r.now().Before(deadline) || r.sleep(ctx, reattachEvery) != nil {
			return nil
		}
	}
}

// handedOver reports whether the run ended because another drover took
// it over (its record is then the new supervisor's to write).
func handedOver(ctx context.Context) bool {
	var lost *lease.LostError
	return errors.As(context.Cause(ctx), &lost)
}

// takeSharedCheckpoints reads the record's copy on every host of an
// adopted run and merges into this machine's record what each copy says
// of its own host's checkpoints and the mirror's (a copy is evidence of
// its own host only, so no host can reorder which checkpoint is newest).
// What a host sends is bounded and checked
// (checkpoint.Record.AdoptShared): every location in it must be in the
// job's checkpoint directories or the mirror.
func (a *attempt) takeSharedCheckpoints(ctx context.Context, conns []*attemptHost) {
	rec, err := a.r.checkpointRecord(a.r.logRoot, a.cfg.Job.Name)
	if err != nil {
		return
	}
	places := checkpoint.Places{Hosts: map[string][]string{}, Mirror: a.cfg.Job.CheckpointMirror}
	for _, c := range conns {
		wd := remoteAbs(c.home, c.host.Workdir)
		places.Hosts[c.host.Name] = []string{remoteAbs(wd, a.cfg.Job.CheckpointDir), checkpoint.OwnDir(wd)}
	}
	for _, c := range conns {
		if ctx.Err() != nil || c.fs == nil {
			return
		}
		file := path.Join(remoteAbs(c.home, c.host.Workdir), agent.RunDir(a.r.runID), sharedRecordFile)
		b, err := hostio.ReadSmall(c.fs, file, checkpoint.MaxSharedRecord+1)
		if err != nil {
			continue // none there: an older drover, or a host added since
		}
		took, err := rec.AdoptShared(b, c.host.Name, places)
		if err != nil {
			a.r.events.printf("%s: %v; not taken", a.prefix(), err)
			continue
		}
		if took {
			a.r.events.printf("%s: took run %s's checkpoint record from %s (newest: %s)", a.prefix(), a.r.runID, c.host.Name, orNone(a.r.newestCheckpoint()))
		}
	}
	a.r.connMu.Lock()
	a.r.sharedChanges = -1 // write the adopted record back to every host
	a.r.connMu.Unlock()
}
