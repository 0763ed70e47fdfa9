//go:build !droveragent

package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/checkpoint"
)

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoints",
		Usage:     "list the job's checkpoints: size, when drover saw each complete, which hosts (and the mirror) hold it",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "log-dir", Usage: "the --log-dir that drover run was given (default: runs/ next to the job file)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c)
			}
			cfg, err := loadJob(c, false)
			if err != nil {
				return err
			}
			rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(launcher.LogRoot(cfg, c.String("log-dir")), cfg.Job.Name), cfg.Job.Name)
			if err != nil {
				return err
			}
			return checkpoint.Render(c.App.Writer, rec.Entries(), time.Local)
		},
	}
}
