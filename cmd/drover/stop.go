//go:build !droveragent

package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/runview"
)

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop the job's run (detached or foreground) from any machine (SIGTERM, SIGKILL after stop_grace)",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "abort", Usage: "SIGKILL every process now"}, hostTimeoutFlag()),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			if err := runview.Stop(c.Context, o, c.Bool("abort"), c.App.ErrWriter); err != nil {
				return err
			}
			fmt.Fprintln(c.App.ErrWriter, "stopped: no process of the run is left")
			return nil
		}),
	}
}
