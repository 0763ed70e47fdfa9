package main

import "github.com/urfave/cli/v2"

// pushCommand is a placeholder until its issue lands.
func pushCommand() *cli.Command {
	return &cli.Command{Name: "push", Usage: "not implemented yet", Hidden: true}
}
