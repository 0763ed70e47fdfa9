//go:build !droveragent

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
)

func psCommand() *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list the live runs this machine supervises, foreground or detached (--all: also those over in the last 7 days); with --inventory, every live run on those hosts",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the runs as JSON"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "also list this machine's runs that are over (kept 7 days after they end)"},
			&cli.StringFlag{Name: flagInventory, Aliases: []string{"i"}, TakesFile: true, Usage: "list the live runs found on the hosts of this inventory (or job) `FILE`"},
			&cli.BoolFlag{Name: flagAcceptNewHosts, Usage: "trust and record host keys not yet in known_hosts (like ssh accept-new)"},
			hostTimeoutFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgsHere(c); err != nil {
				return err
			}
			var rows []hostio.PsRow
			var err error
			if inv := c.String(flagInventory); inv != "" {
				if c.Bool("all") {
					return cli.Exit("drover ps: --all lists this machine's history; --inventory reads only the live runs the hosts have (drop one of them)", agent.ExitUsage)
				}
				bin, berr := os.Executable()
				if berr != nil {
					return fmt.Errorf("find the drover binary to install on hosts: %w", berr)
				}
				rows, err = runview.HostRuns(c.Context, inv, dialOptions(c, nil), bin, c.Duration(flagHostTimeout))
			} else {
				rows, err = hostio.LocalRuns(c.Bool("all"))
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if eerr := enc.Encode(rows); eerr != nil {
					return eerr
				}
			} else {
				runview.RenderPs(c.App.Writer, rows)
			}
			if inv := c.String(flagInventory); inv != "" && !c.Bool("json") {
				err = errors.Join(err, psGPULeases(c, inv))
			}
			return err
		},
	}
}

// psGPULeases lists, after the runs, who holds which GPU on the hosts of
// inv and who waits for them (docs/sharing.md).
func psGPULeases(c *cli.Context, inv string) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	rows, err := runview.HostGPULeases(c.Context, inv, dialOptions(c, nil), bin, c.Duration(flagHostTimeout))
	fmt.Fprintln(c.App.Writer)
	runview.RenderGPULeases(c.App.Writer, rows)
	return err
}
