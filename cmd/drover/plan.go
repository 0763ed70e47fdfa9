package main

import "github.com/urfave/cli/v2"

// planCommand is a placeholder until its issue lands.
func planCommand() *cli.Command {
	return &cli.Command{Name: "plan", Usage: "not implemented yet", Hidden: true}
}
