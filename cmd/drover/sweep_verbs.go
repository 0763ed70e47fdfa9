//go:build !droveragent

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
	"github.com/droverhq/drover/launcher/sweep"
	"github.com/droverhq/drover/launcher/sweeprun"
)

// sweepSubcommands are `drover sweep status|stop|logs JOB.toml`: they
// read the sweep's record on the job's hosts, from any machine.
func sweepSubcommands() []*cli.Command {
	return []*cli.Command{
		{Name: "status", Usage: "show the job's sweep as its hosts record it (from any machine; changes nothing)", ArgsUsage: "JOB.toml",
			Flags:  withFleetFlags(&cli.BoolFlag{Name: "json", Usage: "print the trials and the best one as JSON, as drover sweep --json does"}, hostTimeoutFlag()),
			Action: onSweep(sweepStatus)},
		{Name: "stop", Usage: "stop the job's sweep: its supervisor and every trial; nothing of it is left running", ArgsUsage: "JOB.toml",
			Flags: withFleetFlags(hostTimeoutFlag()), Action: onSweep(sweepStop)},
		{Name: "logs", Usage: "print one trial's logs from its host", ArgsUsage: "JOB.toml --trial T",
			Flags: withFleetFlags(&cli.StringFlag{Name: "trial", Usage: "the trial (t03)"},
				&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the trial ends"}, hostTimeoutFlag()),
			Action: onSweep(sweepLogs)},
	}
}

// onSweep reads the job and its sweep's newest record for a subcommand.
func onSweep(action func(c *cli.Context, cfg *config.Config, store *sweeprun.Store, rec *sweep.Record) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() != 1 {
			return usage(c)
		}
		cfg, err := loadJob(c, false)
		if err != nil {
			return err
		}
		store, err := sweeprun.OpenStore(c.Context, cfg.Hosts, dialOptions(c, cfg.Hosts), c.Duration(flagHostTimeout))
		if err != nil {
			return err
		}
		defer store.Close()
		for _, e := range store.Unreachable {
			fmt.Fprintf(c.App.ErrWriter, "drover: warning: %v\n", e)
		}
		rec, notes := store.Load(nil)
		for _, n := range notes {
			fmt.Fprintf(c.App.ErrWriter, "drover: warning: %s\n", n)
		}
		if rec == nil {
			return cli.Exit(fmt.Sprintf("sweep: no sweep of %s on its hosts (start one with drover sweep %s)", cfg.Job.Name, c.Args().First()), agent.ExitFailed)
		}
		return action(c, cfg, store, rec)
	}
}

// recordParams are the record's parameters, for the table's columns.
func recordParams(rec *sweep.Record) []sweep.Param {
	ps := make([]sweep.Param, len(rec.Params))
	for i, n := range rec.Params {
		ps[i] = sweep.Param{Name: n}
	}
	return ps
}

func recordResults(rec *sweep.Record) []sweep.Result {
	rs := make([]sweep.Result, len(rec.Trials))
	for i, t := range rec.Trials {
		rs[i] = t.Result
	}
	return rs
}

func sweepStatus(c *cli.Context, cfg *config.Config, _ *sweeprun.Store, rec *sweep.Record) error {
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(sweep.Rank(recordResults(rec), rec.Goal))
	}
	state := rec.State
	if !rec.Over() {
		alive := "alive"
		if supervision().SupervisorGone(rec) {
			alive = "gone: run the same drover sweep command again to resume it"
		}
		state = fmt.Sprintf("%s, supervisor pid %d on %s %s", state, rec.SupervisorPid, rec.SupervisorHost, alive)
	}
	fmt.Fprintf(c.App.Writer, "sweep %s: %s (recorded %s)\n", rec.ID, state, rec.Updated.Local().Format(time.DateTime))
	sweeprun.Render(c.App.Writer, recordResults(rec), recordParams(rec))
	return nil
}

// sweepStopWait bounds how long `drover sweep stop` waits for a live
// supervisor to stop its trials and record the end, before it stops
// the trials itself.
const sweepStopWait = 2 * time.Minute

// sweepStop asks the supervisor to stop (a file on the hosts, which it
// looks for every few seconds), waits for it to record the end, then
// stops every trial the record says runs through their agents (the
// supervisor may be gone, or may have died meanwhile) and records the
// sweep stopped.
func sweepStop(c *cli.Context, cfg *config.Config, store *sweeprun.Store, rec *sweep.Record) error {
	if rec.Over() {
		fmt.Fprintf(c.App.ErrWriter, "sweep %s is %s: nothing to stop\n", rec.ID, rec.State)
		return nil
	}
	if err := store.AskStop(rec.ID, currentUser()+"@"+hostname()); err != nil {
		return err
	}
	deadline := time.Now().Add(sweepStopWait)
	for !rec.Over() && !supervision().SupervisorGone(rec) && time.Now().Before(deadline) {
		if err := hostio.Sleep(c.Context, time.Second); err != nil {
			return err
		}
		if r, _ := store.Load(nil); r != nil && r.ID == rec.ID {
			rec = r
		}
	}
	var failed []error
	now := time.Now().UTC()
	for i, t := range rec.Trials {
		if t.State != sweep.Running {
			continue
		}
		err := runview.Stop(c.Context, trialInspect(c, cfg, t.Result), false, c.App.ErrWriter)
		if err != nil && !errors.Is(err, runview.ErrNoRun) {
			failed = append(failed, fmt.Errorf("trial %s on %s: %w", t.ID, t.Host, err))
			continue
		}
		// With no supervisor to record it, the record says what this
		// stop did: the trial was stopped, not failed.
		rec.Trials[i].State, rec.Trials[i].Ended = sweep.Interrupted, &now
	}
	if !rec.Over() {
		rec.State, rec.Seq, rec.Updated = sweep.SweepStopped, rec.Seq+1, now
		if err := store.Save(rec); err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("sweep %s: could not stop everything: %w", rec.ID, errors.Join(failed...))
	}
	fmt.Fprintf(c.App.ErrWriter, "stopped: no trial of sweep %s is left running\n", rec.ID)
	return nil
}

func sweepLogs(c *cli.Context, cfg *config.Config, _ *sweeprun.Store, rec *sweep.Record) error {
	id := c.String("trial")
	if id == "" {
		return cli.Exit("drover sweep logs: say which trial: --trial t03 (drover sweep status lists them)", agent.ExitUsage)
	}
	for _, t := range rec.Trials {
		if t.ID != id {
			continue
		}
		if t.Host == "" {
			return cli.Exit(fmt.Sprintf("sweep %s: trial %s has not started yet (%s)", rec.ID, id, t.State), agent.ExitFailed)
		}
		ctx, stop := signal.NotifyContext(c.Context, interruptSignals()...)
		defer stop()
		return runview.Logs(ctx, trialInspect(c, cfg, t.Result), runview.LogsOptions{Follow: c.Bool("follow"), Notices: c.App.ErrWriter}, c.App.Writer)
	}
	return cli.Exit(fmt.Sprintf("sweep %s has no trial %q (drover sweep status lists them)", rec.ID, id), agent.ExitUsage)
}

// hostname is this machine's name, as a sweep record names its supervisor's.
func hostname() string {
	h, _ := os.Hostname()
	return h
}
