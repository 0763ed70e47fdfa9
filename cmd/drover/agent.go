package main

import "github.com/urfave/cli/v2"

// agentCommand is a placeholder until its issue lands.
func agentCommand() *cli.Command {
	return &cli.Command{Name: "agent", Usage: "not implemented yet", Hidden: true}
}
