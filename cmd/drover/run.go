package main

import "github.com/urfave/cli/v2"

// runCommand is a placeholder until its issue lands.
func runCommand() *cli.Command {
	return &cli.Command{Name: "run", Usage: "not implemented yet", Hidden: true}
}
