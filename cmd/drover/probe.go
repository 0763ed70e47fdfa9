package main

import "github.com/urfave/cli/v2"

// probeCommand is a placeholder until its issue lands.
func probeCommand() *cli.Command {
	return &cli.Command{Name: "probe", Usage: "not implemented yet", Hidden: true}
}
