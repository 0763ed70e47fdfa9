//go:build droveragent

package main

import "github.com/urfave/cli/v2"

// commands, in the agents `make build` carries to hosts (built with the
// droveragent tag, see scripts/build-agent), are only `drover agent`: what
// hosts run. The other commands' files are built only without the tag
// (`//go:build !droveragent`), so the launcher, the planner, push and
// Slurm are not linked at all: a linked package keeps its package-level
// state even when no function of it is called. Less to upload to every
// fresh host, where the upload is most of the install.
func commands() []*cli.Command {
	agent := agentCommand()
	agent.Hidden = false // the only command: list it in --help
	return []*cli.Command{agent}
}
