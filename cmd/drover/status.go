//go:build !droveragent

package main

import (
	"encoding/json"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/runview"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the job's run (detached or foreground) as its hosts know it (from any machine; changes nothing)",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "json", Usage: "print the status as JSON"}, hostTimeoutFlag()),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			st, err := runview.Status(c.Context, o)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			runview.RenderStatus(c.App.Writer, st)
			return nil
		}),
	}
}
