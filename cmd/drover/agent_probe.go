package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/gpu"
)

// agentProbeCommand is `drover agent probe`: it reads this host's GPUs over
// NVML. drover runs it on each host over SSH (`--json`), because NVML is a
// C library that only answers on the machine with the GPUs. A host without a
// driver prints zero devices and the reason and exits 0: having no GPUs is
// a fact to report, not a failure of the probe.
func agentProbeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "print this host's GPUs as read over NVML",
		Description: "Reads NVML on this host. With --json it prints the report drover's " +
			"`probe`, `plan` and `run` consume; without, a table.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent probe takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			host, err := os.Hostname()
			if err != nil {
				host = "localhost"
			}
			rep := gpu.ProbeLocal(host)
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return fmt.Errorf("agent probe: write report: %w", err)
				}
				return nil
			}
			return gpu.RenderTable(c.App.Writer, []gpu.HostResult{{Report: rep}})
		},
	}
}
