//go:build !droveragent

package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/fanout"
)

// probeCommand is `drover probe JOB.toml`: it shows every host's GPUs and
// which of them the job would use, so that a user can see why a host has
// no GPUs or why min_gpus fails before starting a run. It exits 1 when a
// host is unreachable or its selection fails (after printing every host),
// 2 for a bad job file.
func probeCommand() *cli.Command {
	return &cli.Command{
		Name:      "probe",
		Usage:     "show each host's GPUs and which ones the job would use",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "probe only these hosts (comma-separated names)"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array (one object per host) for scripts"},
			&cli.BoolFlag{Name: "health", Usage: "also read every GPU's health: ECC errors, retired pages, remapped rows, throttling, PCIe link, Xids"},
		),
		Action: func(c *cli.Context) error {
			t, err := loadFleetTarget(c, true)
			if err != nil {
				return err
			}
			probe := fanout.Probe
			if c.Bool("health") {
				probe = fanout.ProbeHealth
			}
			results := probe(c.Context, t.cfg.Job, t.hosts, t.dial(c), t.bin)
			if c.Bool("json") {
				err = gpu.RenderJSON(c.App.Writer, results)
			} else {
				err = gpu.RenderTable(c.App.Writer, results)
				if err == nil && c.Bool("health") {
					err = gpu.RenderHealth(c.App.Writer, results)
				}
			}
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.Err != nil {
					failed++
				}
			}
			if failed > 0 {
				return cli.Exit(fmt.Sprintf("probe: %d of %d hosts failed (see above)", failed, len(results)), agent.ExitFailed)
			}
			return nil
		},
	}
}
