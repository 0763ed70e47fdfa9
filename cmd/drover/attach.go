//go:build !droveragent

package main

import (
	"fmt"
	"os/signal"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/runview"
)

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "watch the job's run (detached or foreground) live, its lines and changes of state; Ctrl-C detaches only",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "history", Usage: "print the current attempt's lines so far first"}, sinceFlag()),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			since, err := parseSince(c)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, interruptSignals()...)
			defer stop()
			lo := runview.LogsOptions{Follow: true, FromEnd: !c.Bool("history") && !since.Set(), Events: c.App.ErrWriter,
				Since: since, Notices: c.App.ErrWriter}
			err = runview.Logs(ctx, o, lo, c.App.Writer)
			if ctx.Err() != nil {
				job := c.Args().First()
				fmt.Fprintf(c.App.ErrWriter, "detached; the run goes on\n  re-attach: drover attach %s\n  stop:      drover stop %s\n", job, job)
				return nil
			}
			return err
		}),
	}
}
