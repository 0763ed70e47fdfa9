//go:build !droveragent

package main

import (
	"encoding/json"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/netcheck"
)

// checkCommand is `drover check`: checks of the fleet a job runs on,
// before it runs (`drover check net`).
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:        "check",
		Usage:       "check the fleet before a run",
		Subcommands: []*cli.Command{checkNetCommand()},
	}
}

// checkNetCommand is `drover check net JOB.toml`: the links between the
// job's hosts (netcheck.Run). Exit 1 names the hosts under the job's
// min_bandwidth or that could not be measured.
func checkNetCommand() *cli.Command {
	return &cli.Command{
		Name:      "net",
		Usage:     "measure bandwidth and round trip between the job's hosts, over the collectives' interface",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "measure only these hosts (comma-separated names)"},
			&cli.DurationFlag{Name: "duration", Value: netcheck.DefaultDuration, Usage: "measure each link this long"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		),
		Action: func(c *cli.Context) error {
			t, err := loadFleetTarget(c, false)
			if err != nil {
				return err
			}
			rep := netcheck.Run(c.Context, netcheck.Options{Job: t.cfg.Job, Hosts: t.hosts,
				Dial: t.dial(c), Bin: t.bin, Duration: c.Duration("duration")})
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = netcheck.Render(c.App.Writer, rep)
			}
			if err != nil {
				return err
			}
			if err := netcheck.CheckMinBandwidth(rep, t.cfg.Job.MinBandwidth); err != nil {
				var ne *netcheck.SlowError
				if errors.As(err, &ne) {
					return cli.Exit(err.Error(), agent.ExitFailed)
				}
				return err
			}
			return nil
		},
	}
}
