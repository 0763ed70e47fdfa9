//go:build !droveragent

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "push the code, start every process, stream logs, restart the group on failure",
		ArgsUsage: "JOB.toml",
		Flags:     runFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c)
			}
			child := detachedChild()
			if c.Bool("detach") && !child {
				return startDetached(c)
			}
			var ready, queued func(string, string)
			if child {
				ignoreSIGPIPE()
				ready, queued = detachedSays("ready"), detachedSays("queued")
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the drover binary to install on hosts: %w", err)
			}
			load, alloc, err := allocation(config.LoadOptions{})
			if err != nil {
				return err
			}
			restartOffset, slurmJob := 0, ""
			if alloc != nil {
				restartOffset, slurmJob = alloc.RestartCount, alloc.JobID
			}
			// First SIGINT/SIGTERM: graceful stop of every process; second: kill at once.
			ctx, hard, stop := twoStageInterrupt(c.Context, c.App.ErrWriter, "stopping every process")
			defer stop()
			ctx, stdoutGone := context.WithCancelCause(ctx)
			defer stdoutGone(nil)
			out := watchEPIPE(c.App.Writer, func() {
				fmt.Fprintf(c.App.ErrWriter, "drover: %v\n", errStdoutGone)
				stdoutGone(errStdoutGone)
			})
			res, err := launcher.Run(ctx, launcher.RunOptions{
				JobPath:       c.Args().First(),
				InventoryPath: c.String(flagInventory),
				LogDir:        c.String("log-dir"),
				AgentBinary:   bin,
				PushCacheDir:  cacheDir(),
				Dial:          dialOptions(c, nil),
				Allocation:    load.Allocation,
				SlurmJobID:    slurmJob,
				RestartOffset: restartOffset,
				Out:           out,
				Events:        c.App.ErrWriter,
				Quiet:         c.Bool("quiet") || child,
				Hard:          hard,
				Force:         c.Bool("force"),
				Fresh:         c.Bool("fresh"),
				Queue:         c.Bool("queue"),
				QueueTimeout:  c.Duration("queue-timeout"),
				Detach:        c.Bool("detach"),
				Ready:         ready,
				Queued:        queued,
			})
			if err != nil {
				if ctx.Err() != nil {
					return cli.Exit(err.Error(), agent.ExitInterrupted)
				}
				if launcher.IsHeld(err) {
					// Another live run: a usage error, nothing was touched.
					return cli.Exit(err.Error(), agent.ExitUsage)
				}
				return err
			}
			launcher.RenderSummary(c.App.ErrWriter, res)
			return runExit(res)
		},
	}
}

// runFlags are drover run's flags.
func runFlags() []cli.Flag {
	return withFleetFlags(
		&cli.StringFlag{Name: "log-dir", Usage: "where runs/<job>-<start>/ is written (default: runs/ next to the job file)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "show only drover's own events (logs still get every line)"},
		&cli.BoolFlag{Name: "force", Usage: "take over workdirs that another live drover run holds (that run stops)"},
		&cli.BoolFlag{Name: "fresh", Usage: "start from scratch: resume no checkpoint of an earlier run (drover's copies of them are set aside, nothing is deleted)"},
		&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "return once the run runs; it goes on in the background (see drover status, logs, stop)"},
		&cli.BoolFlag{Name: "queue", Usage: "when other runs lease the GPUs the job needs, wait for them in each host's queue (first come, first served) instead of failing"},
		&cli.DurationFlag{Name: "queue-timeout", Usage: "with --queue: fail after waiting this long for the GPUs (0: wait as long as it takes)"},
	)
}

// runExit is drover run's exit for how the run ended.
func runExit(res *launcher.Result) error {
	switch res.Outcome {
	case launcher.Succeeded:
		return nil
	case launcher.Interrupted:
		return cli.Exit("", agent.ExitInterrupted)
	default:
		if launcher.IsLost(res.Err) {
			// Another run took over with --force: this one
			// failed, and says who took over.
			return cli.Exit(res.Err.Error(), agent.ExitFailed)
		}
		return cli.Exit("", agent.ExitFailed)
	}
}
