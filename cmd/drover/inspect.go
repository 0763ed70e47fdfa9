//go:build !droveragent

package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
)

// The commands that read a run from its hosts (status, stop, logs,
// attach) share their argument and what the hosts are read with.

// onRun is the action of a command that reads a run from its hosts
// (status, stop, logs, attach): one JOB.toml argument, then what the
// hosts are read with.
func onRun(action func(c *cli.Context, o runview.InspectOptions) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() != 1 {
			return usage(c)
		}
		o, err := inspectOptions(c)
		if err != nil {
			return err
		}
		return action(c, o)
	}
}

// inspectOptions are what status, stop and logs need to read the hosts.
func inspectOptions(c *cli.Context) (runview.InspectOptions, error) {
	bin, err := os.Executable()
	if err != nil {
		return runview.InspectOptions{}, fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	return runview.InspectOptions{JobPath: c.Args().First(), InventoryPath: c.String(flagInventory), Dial: dialOptions(c, nil), AgentBinary: bin,
		HostWait: c.Duration(flagHostTimeout)}, nil
}

// flagHostTimeout bounds, per host, what status, stop and ps --inventory
// wait for: a host past it is reported unreachable and the others are
// read (and stopped) all the same.
const flagHostTimeout = "host-timeout"

// hostTimeoutFlag is --host-timeout.
func hostTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: flagHostTimeout, Value: hostio.DefaultHostWait,
		Usage: "count a host that has not answered (dial, login, agent) within this long as unreachable"}
}

// noArgsHere is the usage error of a command that takes no arguments.
func noArgsHere(c *cli.Context) error {
	if c.NArg() > 0 {
		return usage(c)
	}
	return nil
}
