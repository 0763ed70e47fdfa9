//go:build !droveragent

package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
)

// versionCommand is `drover version` (see launcher.WriteVersion).
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "print drover's version, commit, Go release, platform and agents",
		Action: printVersion,
	}
}

// printVersion is `drover version` and `drover --version`.
func printVersion(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("version takes no arguments, got %q\n%s", c.Args().First(), agent.UsageLine(c.Command)), agent.ExitUsage)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the running drover binary for its agents: %w", err)
	}
	return launcher.WriteVersion(c.App.Writer, self)
}
