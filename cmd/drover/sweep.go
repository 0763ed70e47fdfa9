//go:build !droveragent

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/sweep"
	"github.com/droverhq/drover/launcher/sweeprun"
)

// sweepCommand is `drover sweep JOB.toml`: many runs of the job, one per
// trial, placed on the fleet's free GPUs (docs/sweeps.md). The decisions
// are package sweep's and the running package sweeprun's; this is wiring.
func sweepCommand() *cli.Command {
	return &cli.Command{
		Name:      "sweep",
		Usage:     "run the job once per trial of a parameter sweep, in parallel on the free GPUs, and rank the trials",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.GenericFlag{Name: "param", Value: &paramFlag{}, Usage: "a parameter: NAME=a,b,c, NAME=LO..HI, NAME=uniform(a,b), loguniform(a,b) or choice(a,b); several make a grid"},
			&cli.StringFlag{Name: "metric", Usage: "the objective, as the trainer prints it (NAME=VALUE; default loss)"},
			&cli.StringFlag{Name: "goal", Usage: "minimize (default) or maximize"},
			&cli.StringFlag{Name: "early-stop", Usage: "median (stop a trial worse than the completed trials' median) or none"},
			&cli.StringFlag{Name: "metric-regex", Usage: "a Go regexp with groups name and value (and step) for other metric forms"},
			&cli.IntFlag{Name: "max-parallel", Usage: "run at most this many trials at once (default: as many as the GPUs allow)"},
			&cli.IntFlag{Name: "min-trials", Usage: "completed trials before the median rule stops any (default 3)"},
			&cli.IntFlag{Name: "samples", Usage: "draws of the random parameters"},
			&cli.IntFlag{Name: "gpus-per-trial", Usage: "GPUs of one host each trial gets (default 1)"},
			&cli.IntFlag{Name: "hosts-per-trial", Usage: "hosts each trial runs on, as one group, with --gpus-per-trial GPUs on each (default 1)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the random draws"},
			&cli.StringFlag{Name: "log-dir", Usage: "where each trial's runs/<job>-<trial>-<start>/ is written (default: runs/ next to the job file)"},
			&cli.BoolFlag{Name: "json", Usage: "print the trials and the best one as JSON (the table goes to stderr)"},
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "return once the sweep runs; it goes on in the background (see drover sweep status, logs, stop)"},
		),
		Subcommands: sweepSubcommands(),
		Action:      sweepAction,
	}
}

func sweepAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return usage(c)
	}
	child := detachedChild()
	if c.Bool("detach") && !child {
		return startBackground(c, describeSweep(c))
	}
	if child {
		ignoreSIGPIPE()
	}
	cfg, err := loadJob(c, false)
	if err != nil {
		return err
	}
	opts, err := sweep.Resolve(sweepFlags(c), cfg.Sweep, cfg.Job.Command)
	if err != nil {
		return sweepExit(err)
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	ctx, _, stop := twoStageInterrupt(c.Context, c.App.ErrWriter, "stopping every trial")
	defer stop()
	ctx, stopSweep := context.WithCancelCause(ctx)
	defer stopSweep(nil)
	sess, fleet, free, err := startSweep(ctx, c, cfg, opts, bin, stopSweep)
	if err != nil {
		return err
	}
	if child {
		sweepReady(c, cfg, sess.rec.ID)
	}
	tableOut := c.App.Writer
	if c.Bool("json") {
		tableOut = c.App.ErrWriter
	}
	f2, isFile := tableOut.(*os.File)
	live := isFile && term.IsTerminal(int(f2.Fd()))
	id := sess.rec.ID
	fmt.Fprintf(c.App.ErrWriter, "drover: sweep %s: %s on %d hosts\n", id, opts, len(fleet))
	code := newSweepCode(c, cfg, c.App.ErrWriter)
	s := &sweeprun.Sweep{ID: id, Options: opts, Command: cfg.Job.Command, Fleet: fleet, Free: free, Table: tableOut, Live: live,
		Resumed: sess.resumed, Persist: sess.persist,
		Policy: sweep.PolicyOf(cfg.Job), Refresh: func(ctx context.Context) ([]sweep.HostGPUs, error) {
			_, free := sweepLook(ctx, c, cfg, bin, io.Discard)
			return free, ctx.Err()
		},
		RunTrial: runTrial(c, cfg, bin, code, sess.rec.Detached)}
	out, err := s.Run(ctx)
	sess.finish(err)
	return sweepReport(c, opts, out, err, context.Cause(ctx))
}

// startSweep reads the sweep's record (a resume decides its trials'
// fates), looks at the hosts' GPUs, checks that the trials fit them and
// claims the record. A resume's adopted trials hold GPUs that the look
// shows busy or leased by their own runs: they are the sweep's, merged
// into the fleet before the checks, or a sweep whose adopted trials hold
// every GPU could not be resumed.
func startSweep(ctx context.Context, c *cli.Context, cfg *config.Config, opts *sweep.Options, bin string,
	stop context.CancelCauseFunc) (sess *sweepSession, fleet, free []sweep.HostGPUs, err error) {
	sess, err = openSweep(ctx, c, cfg, opts, c.Bool("detach"), stop)
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			sess.store.Close()
		}
	}()
	fleet, free = sweepLook(ctx, c, cfg, bin, c.App.ErrWriter)
	adopted := sess.adopted()
	fleet, free = sweep.Merge(fleet, adopted...), sweep.Merge(free, adopted...)
	if len(fleet) == 0 {
		return nil, nil, nil, cli.Exit(fmt.Sprintf("sweep: no host of %s has a free GPU (see drover probe %s)", cfg.Path, cfg.Path), agent.ExitFailed)
	}
	if err := sweep.CheckFits(fleet, opts.Shape()); err != nil {
		return nil, nil, nil, sweepExit(err)
	}
	if err := sess.claim(); err != nil {
		return nil, nil, nil, err
	}
	return sess, fleet, free, nil
}

// sweepFlags are the sweep's command-line flags, for sweep.Resolve.
func sweepFlags(c *cli.Context) sweep.Flags {
	f := sweep.Flags{Params: c.Generic("param").(*paramFlag).specs, Metric: c.String("metric"), Goal: c.String("goal"),
		EarlyStop: c.String("early-stop"), MetricRegex: c.String("metric-regex"), MaxParallel: c.Int("max-parallel"),
		MinTrials: c.Int("min-trials"), Samples: c.Int("samples"), GPUsPerTrial: c.Int("gpus-per-trial"),
		HostsPerTrial: c.Int("hosts-per-trial")}
	if c.IsSet("seed") {
		seed := c.Uint64("seed")
		f.Seed = &seed
	}
	return f
}

// runTrial runs one trial as a drover run of the job (detached with a
// detached sweep), once its host has the sweep's code; a run that gave
// its placement back is a setback the runner requeues.
func runTrial(c *cli.Context, cfg *config.Config, bin string, code *sweepCode, detach bool) sweeprun.RunTrial {
	return func(ctx context.Context, spec sweeprun.TrialSpec) error {
		if err := code.ready(ctx, spec.Placement, spec.Trial.ID); err != nil {
			return trialSetback(err, spec.Placement)
		}
		res, err := launcher.Run(ctx, launcher.RunOptions{JobPath: c.Args().First(), InventoryPath: c.String(flagInventory),
			LogDir: c.String("log-dir"), AgentBinary: bin, Dial: dialOptions(c, cfg.Hosts),
			Out: spec.Out, Events: io.Discard, Env: spec.Env, Adjust: sweeprun.TrialConfig(spec), Detach: detach})
		switch {
		case err != nil:
			return trialSetback(err, spec.Placement)
		case res.Outcome != launcher.Succeeded:
			return trialSetback(fmt.Errorf("%w (logs: %s)", res.Err, res.LogDir), spec.Placement)
		}
		return nil
	}
}

// stoppedSummary says that the sweep was stopped, by whom, and what became
// of its trials: those it stopped while they ran, those it never started.
func stoppedSummary(trials []sweep.Result, cause error) string {
	by := "interrupted"
	if errors.Is(cause, errSweepStopped) {
		by = errSweepStopped.Error()
	}
	var stopped, pending []string
	for _, t := range trials {
		switch t.State {
		case sweep.Interrupted:
			stopped = append(stopped, t.ID)
		case sweep.Pending:
			pending = append(pending, t.ID)
		}
	}
	slices.Sort(stopped)
	slices.Sort(pending)
	s := fmt.Sprintf("sweep %s", by)
	if len(stopped) > 0 {
		s += fmt.Sprintf("; trials stopped while running (not failed): %s", strings.Join(stopped, ", "))
	}
	if len(pending) > 0 {
		s += fmt.Sprintf("; not started: %s", strings.Join(pending, ", "))
	}
	return s
}

// paramFlag is --param, given once per parameter: a string slice flag
// would split lr=0.001,0.01 at its commas.
type paramFlag struct{ specs []string }

func (p *paramFlag) Set(s string) error { p.specs = append(p.specs, s); return nil }
func (p *paramFlag) String() string     { return strings.Join(p.specs, " ") }

// sweepExit is exit 2 for a sweep.Error (bad flags or [sweep] keys).
func sweepExit(err error) error {
	var se *sweep.Error
	if errors.As(err, &se) {
		return cli.Exit(err.Error(), agent.ExitUsage)
	}
	return err
}

// sweepReport prints the ranked trials (or --json) and exits 0 when every
// trial completed or was stopped early, 1 otherwise, 130 when the sweep
// was stopped (Ctrl-C, or drover sweep stop: cause), which says so and
// names the trials it stopped (no failures of theirs).
func sweepReport(c *cli.Context, opts *sweep.Options, out sweeprun.Outcome, runErr, cause error) error {
	for id, err := range out.Errors {
		fmt.Fprintf(c.App.ErrWriter, "drover: trial %s failed: %v\n", id, err)
	}
	if errors.Is(runErr, context.Canceled) {
		fmt.Fprintf(c.App.ErrWriter, "drover: %s\n", stoppedSummary(out.Report.Trials, cause))
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out.Report); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.App.Writer, "\ntrials by %s (%s):\n", opts.Metric, opts.Goal)
		sweeprun.Render(c.App.Writer, out.Report.Trials, opts.Params)
		if b := out.Report.Best; b != nil {
			fmt.Fprintf(c.App.Writer, "best: %s %s=%g %v\n", b.ID, opts.Metric, b.Metric, b.Params)
		}
	}
	switch {
	case errors.Is(runErr, context.Canceled):
		return cli.Exit("", agent.ExitInterrupted)
	case runErr != nil:
		return runErr
	case !sweep.Succeeded(out.Report.Trials):
		return cli.Exit("", agent.ExitFailed)
	}
	return nil
}
