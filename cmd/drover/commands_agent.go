//go:build droveragent

package main

import "github.com/urfave/cli/v2"

// commands, in the agents `make build` carries to hosts (built with the
// droveragent tag, see scripts/build-agent), are only `drover agent`: what
// hosts run. The rest of drover (the SSH client, the launcher, the
// planner) is left out by the linker, a quarter less to upload to every
// fresh host, where the upload is most of the install.
func commands() []*cli.Command {
	agent := agentCommand()
	agent.Hidden = false // the only command: list it in --help
	return []*cli.Command{agent}
}
