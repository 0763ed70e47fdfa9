//go:build !droveragent

package main

import "github.com/urfave/cli/v2"

// commands are drover's commands. A build with the droveragent tag has
// only `drover agent` (commands_agent.go).
func commands() []*cli.Command {
	return []*cli.Command{
		planCommand(),
		execCommand(),
		pushCommand(),
		setupCommand(),
		stageCommand(),
		probeCommand(),
		topCommand(),
		checkCommand(),
		runCommand(),
		sweepCommand(),
		statusCommand(),
		stacksCommand(),
		stopCommand(),
		logsCommand(),
		psCommand(),
		attachCommand(),
		submitCommand(),
		checkpointsCommand(),
		agentCommand(),
		slurmStep(),
		versionCommand(),
	}
}
