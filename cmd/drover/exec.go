package main

import "github.com/urfave/cli/v2"

// execCommand is a placeholder until its issue lands.
func execCommand() *cli.Command {
	return &cli.Command{Name: "exec", Usage: "not implemented yet", Hidden: true}
}
