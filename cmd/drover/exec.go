//go:build !droveragent

package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/fanout"
)

// execCommand is `drover exec JOB.toml -- CMD ARGS...`: run an ad-hoc
// command on every host of the job at once (pdsh-like), e.g. to install
// packages or look at nvidia-smi. One argument is a shell line, as ssh and
// pdsh take it; several are passed exactly (fanout.ExecOptions.Args).
// Output is streamed line by line prefixed "[host] "; the exit status is
// the worst of the hosts' (255 for a host that could not be reached),
// followed by a summary of the failures on stderr. Ctrl-C stops the command
// on every host (SIGTERM, SIGKILL after --stop-grace or a second Ctrl-C)
// before drover exits, and exits 130; --timeout stops it the same way on a
// host where it runs too long.
func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command on every host at once",
		ArgsUsage: "JOB.toml -- 'SHELL LINE' | CMD [ARGS...]",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "only these hosts (comma-separated names); spare hosts run only when named here"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop the command on a host where it runs longer than this (exit status 124 there); 0: no limit"},
			&cli.DurationFlag{Name: "stop-grace", Value: fanout.DefaultExecGrace, Usage: "after Ctrl-C or --timeout, time between SIGTERM and SIGKILL on the hosts"},
		),
		Action: func(c *cli.Context) error {
			jobPath, args, err := splitExecArgs(c.Args().Slice())
			if err != nil {
				return cli.Exit(err.Error()+"\n"+agent.UsageLine(c.Command), agent.ExitUsage)
			}
			cfg, err := loadInAllocation(jobPath, config.LoadOptions{InventoryPath: c.String(flagInventory), HostsOnly: true})
			if err != nil {
				return err
			}
			hosts, err := pickHosts(cfg.Hosts, c.String("hosts"), false)
			if err != nil {
				return cli.Exit(err.Error(), agent.ExitUsage)
			}
			ctx, hard, stop := twoStageInterrupt(c.Context, c.App.ErrWriter, "stopping the command on every host")
			defer stop()
			results := fanout.Exec(ctx, hosts, fanout.ExecOptions{
				Args:    args,
				Timeout: c.Duration("timeout"),
				Grace:   c.Duration("stop-grace"),
				Hard:    hard,
				Dial:    dialOptions(c, cfg.Hosts),
				Stdout:  c.App.Writer,
				Stderr:  c.App.ErrWriter,
			})
			if err := fanout.WriteExecSummary(c.App.ErrWriter, results); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return cli.Exit("", agent.ExitInterrupted)
			}
			if code := fanout.WorstExitCode(results); code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// splitExecArgs separates JOB.toml from the command. The "--" is what keeps
// the command's own flags away from drover's parser; it is required so that
// `drover exec job.toml ls -l` cannot silently mean something else later.
func splitExecArgs(args []string) (job string, cmd []string, err error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return "", nil, fmt.Errorf("exec: missing JOB.toml")
	}
	job, rest := args[0], args[1:]
	if len(rest) == 0 || rest[0] != "--" {
		return "", nil, fmt.Errorf("exec: put -- between JOB.toml and the command")
	}
	cmd = rest[1:]
	if len(cmd) == 0 {
		return "", nil, fmt.Errorf("exec: missing command after --")
	}
	return job, cmd, nil
}
