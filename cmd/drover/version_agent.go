//go:build droveragent

package main

import (
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
)

// printVersion is `drover --version` of an agent build: its own version
// (an agent carries no other agents to list).
func printVersion(c *cli.Context) error {
	return agent.WriteVersion(c.App.Writer)
}
