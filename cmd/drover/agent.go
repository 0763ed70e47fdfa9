package main

import (
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
)

// agentCommand is `drover agent`: what drover runs on hosts. Package agent
// owns it whole (its flags, its usage, and the argv the controller sends),
// so this is only where it is mounted.
func agentCommand() *cli.Command { return agent.CLI() }
