//go:build !droveragent

package main

import (
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/runview"
)

func stacksCommand() *cli.Command {
	return &cli.Command{
		Name:      "stacks",
		Usage:     "print every live rank's Python stack, all threads (from any machine; stops nothing)",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.IntFlag{Name: "rank", Value: -1, Usage: "only this rank's stack"},
			&cli.StringFlag{Name: "host", Usage: "only the processes on this host (its name in the job file)"},
			&cli.BoolFlag{Name: "native", Usage: "native frames too (where the host has py-spy)"},
			hostTimeoutFlag()),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			stacks, failed, err := runview.Stacks(c.Context, o, runview.StacksOptions{Rank: c.Int("rank"), Host: c.String("host"), Native: c.Bool("native")})
			if err != nil {
				return err
			}
			runview.RenderStacks(c.App.Writer, stacks, failed)
			return nil
		}),
	}
}
