//go:build !droveragent

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/runview"
	"github.com/droverhq/drover/launcher/sweep"
	"github.com/droverhq/drover/launcher/sweeprun"
)

// A sweep keeps its record on the job's hosts (sweeprun.Store): `drover
// sweep -d` detaches its supervisor as `drover run -d` does, each of its
// trials a detached run of its own that outlives the supervisor; running
// the same command again when the sweep is unfinished and its
// supervisor gone resumes it (sweep.ResumeTrial decides each trial's
// fate); `drover sweep status|stop|logs` read the record from any
// machine (docs/sweeps.md).

// errSweepStopped is the cause of a sweep that `drover sweep stop` stopped.
var errSweepStopped = errors.New("stopped by drover sweep stop")

// sweepSession is a sweep's record as its supervisor keeps it.
type sweepSession struct {
	store    *sweeprun.Store
	rec      sweep.Record
	resumed  []sweeprun.Resumed
	events   io.Writer
	stop     context.CancelCauseFunc
	last     []byte
	lastAt   time.Time
	stopping bool
}

// openSweep reads the job's sweep record on its hosts and prepares this
// sweep's: a new one, or the unfinished one of the same sweep whose
// supervisor is gone, resumed. A live supervisor of any unfinished sweep
// of the job is an error (exit 2): two sweeps would share the trials'
// workdirs. Nothing is written until claim: the caller first checks the
// trials fit the fleet, which a resume's adopted trials are part of.
func openSweep(ctx context.Context, c *cli.Context, cfg *config.Config, opts *sweep.Options, detached bool, stop context.CancelCauseFunc) (*sweepSession, error) {
	store, err := sweeprun.OpenStore(ctx, cfg.Hosts, dialOptions(c, cfg.Hosts), 0)
	if err != nil {
		return nil, fmt.Errorf("sweep: read the sweep's record on the hosts of %s: %w", cfg.Path, err)
	}
	s := &sweepSession{store: store, events: c.App.ErrWriter, stop: stop}
	for _, e := range store.Unreachable {
		fmt.Fprintf(s.events, "drover: warning: %v\n", e)
	}
	key := opts.Key(cfg.Job.Command)
	prior, notes := store.Load(nil)
	for _, n := range notes {
		fmt.Fprintf(s.events, "drover: warning: %s\n", n)
	}
	here := hostname()
	sup := supervision()
	switch {
	case prior != nil && !prior.Over() && !sup.SupervisorGone(prior):
		store.Close()
		return nil, cli.Exit(fmt.Sprintf("sweep: sweep %s of %s is running, supervised by pid %d on %s: follow it with `drover sweep status %s`, or stop it with `drover sweep stop %s`",
			prior.ID, cfg.Job.Name, prior.SupervisorPid, prior.SupervisorHost, c.Args().First(), c.Args().First()), agent.ExitUsage)
	case prior != nil && !prior.Over() && prior.Key == key && sweep.CheckRecord(prior, opts) == nil:
		s.rec = *prior
		if s.resumed, err = s.decide(ctx, c, cfg, opts); err != nil {
			store.Close()
			return nil, err
		}
	default:
		if prior != nil && !prior.Over() {
			fmt.Fprintf(s.events, "drover: sweep %s (other parameters) was not finished; its supervisor is gone: starting a new sweep\n", prior.ID)
		}
		s.rec = newRecord(cfg, opts, key)
	}
	s.rec.State, s.rec.Detached, s.rec.SupervisorHost = sweep.SweepRunning, detached, here
	s.rec.SupervisorPid, s.rec.SupervisorStart = os.Getpid(), agent.ProcessStart(os.Getpid())
	return s, nil
}

// claim writes the record as this supervisor's, on every host.
func (s *sweepSession) claim() error {
	return s.save(s.rec.Trials)
}

// adopted are the placements of the trials a resume adopts: GPUs that
// their runs hold, which a look at the hosts shows busy or leased.
func (s *sweepSession) adopted() []sweep.Placement {
	var ps []sweep.Placement
	for _, r := range s.resumed {
		if r.Action == sweep.Adopt {
			ps = append(ps, r.Record.Placement())
		}
	}
	return ps
}

// supervision is how this machine judges a record's supervisor.
func supervision() sweep.Supervision {
	return sweep.Supervision{Here: hostname(), Alive: agent.ProcessAlive, Now: time.Now()}
}

// newRecord is a new sweep's record: every trial pending.
func newRecord(cfg *config.Config, opts *sweep.Options, key string) sweep.Record {
	r := sweep.Record{Version: sweep.RecordVersion, ID: fmt.Sprintf("%s-%s", cfg.Job.Name, time.Now().Format("20060102-150405")),
		Key: key, Metric: opts.Metric, Goal: opts.Goal}
	for _, p := range opts.Params {
		r.Params = append(r.Params, p.Name)
	}
	for _, t := range opts.Trials {
		r.Trials = append(r.Trials, sweep.TrialRecord{Result: sweep.Result{ID: t.ID, Params: t.Params, State: sweep.Pending}})
	}
	return r
}

// decide reads, for each trial the record says runs, its run on its
// host, and decides every trial's fate (sweep.ResumeTrial), saying so.
func (s *sweepSession) decide(ctx context.Context, c *cli.Context, cfg *config.Config, opts *sweep.Options) ([]sweeprun.Resumed, error) {
	out := make([]sweeprun.Resumed, len(s.rec.Trials))
	var said []string
	for i, t := range s.rec.Trials {
		var seen sweep.RunSeen
		if t.State == sweep.Running {
			var err error
			if seen, err = trialSeen(ctx, c, cfg, t.Result); err != nil {
				return nil, fmt.Errorf("sweep %s: cannot tell whether trial %s still runs on %s (%w): run the command again once the host answers",
					s.rec.ID, t.ID, t.Host, err)
			}
		}
		act, st := sweep.ResumeTrial(t.Result, seen)
		out[i] = sweeprun.Resumed{Record: t, Action: act, State: st}
		if act == sweep.Rerun {
			out[i].Record.Result = sweep.Result{ID: t.ID, Params: t.Params, State: sweep.Pending}
		}
		said = append(said, fmt.Sprintf("%s %s", t.ID, [...]string{"runs", string(st) + " (kept)", "running (adopted)"}[act]))
	}
	fmt.Fprintf(s.events, "drover: resuming sweep %s, whose supervisor %s pid %d is gone: %s\n", s.rec.ID, s.rec.SupervisorHost, s.rec.SupervisorPid, strings.Join(said, ", "))
	return out, nil
}

// trialSeen is what trial r's host says of the trial's newest run.
func trialSeen(ctx context.Context, c *cli.Context, cfg *config.Config, r sweep.Result) (sweep.RunSeen, error) {
	st, err := runview.Status(ctx, trialInspect(c, cfg, r))
	if errors.Is(err, runview.ErrNoRun) {
		return sweep.RunSeen{}, nil
	}
	if err != nil {
		return sweep.RunSeen{}, err
	}
	seen := sweep.RunSeen{Found: true, Over: st.State.Final(), Succeeded: st.State == agent.RunSucceeded, Exited: len(st.Processes) > 0,
		Lost: st.State == agent.RunLost}
	if len(st.RunID) >= 15 {
		seen.RunStarted, _ = time.Parse("20060102-150405", st.RunID[:15])
	}
	ok := true
	for _, p := range st.Processes {
		seen.Alive = seen.Alive || p.State == agent.ProcRunning
		seen.Exited = seen.Exited && p.Exit != nil
		ok = ok && p.Exit != nil && *p.Exit == 0
	}
	seen.Succeeded = seen.Succeeded || (seen.Exited && ok)
	return seen, nil
}

// trialInspect is what status, stop and logs need to read trial r's run
// on its recorded host.
func trialInspect(c *cli.Context, cfg *config.Config, r sweep.Result) runview.InspectOptions {
	o, _ := inspectOptions(c)
	spec := sweeprun.TrialSpec{Trial: sweep.Trial{ID: r.ID, Params: r.Params}, Command: cfg.Job.Command,
		Placement: r.Placement()}
	o.Adjust = sweeprun.TrialConfig(spec)
	return o
}

// persist is the runner's Persist: the record is written when a trial
// changed, and every sweep.HeartbeatEvery as a sign of life; a stop
// request found on the hosts ends the sweep.
func (s *sweepSession) persist(trials []sweep.TrialRecord) {
	if err := s.save(trials); err != nil {
		fmt.Fprintf(s.events, "drover: warning: %v\n", err)
	}
	if !s.stopping && s.store.StopAsked(s.rec.ID) {
		s.stopping = true
		fmt.Fprintf(s.events, "drover: sweep %s: %v: stopping every trial\n", s.rec.ID, errSweepStopped)
		s.stop(errSweepStopped)
	}
}

// save writes the record with trials when they changed or the heartbeat
// is due.
func (s *sweepSession) save(trials []sweep.TrialRecord) error {
	data, _ := json.Marshal(trials)
	if s.last != nil && bytes.Equal(data, s.last) && time.Since(s.lastAt) < sweep.HeartbeatEvery {
		return nil
	}
	s.rec.Trials = trials
	s.rec.Seq++
	s.rec.Updated = time.Now().UTC()
	if err := s.store.Save(&s.rec); err != nil {
		return err
	}
	s.last, s.lastAt = data, time.Now()
	return nil
}

// finish records how the sweep ended and closes the hosts.
func (s *sweepSession) finish(runErr error) {
	defer s.store.Close()
	s.rec.State = sweep.SweepDone
	if runErr != nil || s.stopping {
		s.rec.State = sweep.SweepStopped
	}
	s.last = nil
	if err := s.save(s.rec.Trials); err != nil {
		fmt.Fprintf(s.events, "drover: warning: %v\n", err)
	}
}

// sweepReady is a detached sweep's supervisor saying it runs: its output
// goes to <log root>/<sweep id>/supervisor.log from now on, and `drover
// sweep -d` is told (as detachedReady for `drover run -d`).
func sweepReady(c *cli.Context, cfg *config.Config, id string) {
	dir := filepath.Join(launcher.LogRoot(cfg, c.String("log-dir")), id)
	_ = os.MkdirAll(dir, 0o755)
	detachedTell("ready", id, dir)
}

// describeSweep says, for `drover sweep -d`, how to follow and stop it.
func describeSweep(c *cli.Context) func(word, id, logDir string, pid int) {
	job := c.Args().First()
	return func(_, id, logDir string, pid int) {
		fmt.Fprintf(c.App.Writer, "sweep %s started in the background\n  status: drover sweep status %s\n  logs:   drover sweep logs %s --trial t0\n  stop:   drover sweep stop %s\n  supervisor: pid %d, output in %s\n",
			id, job, job, job, pid, filepath.Join(logDir, "supervisor.log"))
	}
}
