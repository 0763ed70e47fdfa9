package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
)

// agentCommand is `drover agent`: the commands drover runs on hosts over the
// transport. Hidden because people never type them.
func agentCommand() *cli.Command {
	return &cli.Command{
		Name:   "agent",
		Usage:  "runs on hosts; used by drover itself",
		Hidden: true,
		Subcommands: []*cli.Command{
			agentRunCommand(),
			agentStopCommand(),
			agentPreflightCommand(),
			agentProbeCommand(),
			agentVersionCommand(),
			agentSFTPCommand(),
		},
	}
}

// agentRunCommand is `drover agent run -- CMD...`, the supervisor that keeps
// a training process from outliving the drover that started it (see package
// launcher/agent for the stdin protocol).
func agentRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run CMD in its own process group and stop the group when drover goes away",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "grace", Value: agent.DefaultGrace, Usage: "time between SIGTERM and SIGKILL"},
			&cli.DurationFlag{Name: "heartbeat", Usage: "stop when no line arrives on stdin for this long (0: off)"},
			&cli.StringFlag{Name: "pidfile", Usage: "record the group here while it runs"},
			&cli.StringFlag{Name: "log", Usage: "also append all output to this file"},
			&cli.StringFlag{Name: "job", Usage: "job name, for the pidfile"},
			&cli.BoolFlag{Name: "env-stdin", Usage: "read CMD's environment (a JSON object) from the first line of stdin"},
			&cli.BoolFlag{Name: "watch-workers", Usage: "report each exit of CMD's children (torchrun's workers); the first abnormal one fails the run"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("usage: drover agent run [flags] -- CMD [ARGS...]", exitConfig)
			}
			// SIGHUP too: the agent may hold a terminal when run by hand.
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
			defer stop()
			code, err := agent.Run(ctx, agent.RunOptions{
				Args:         c.Args().Slice(),
				Grace:        c.Duration("grace"),
				Heartbeat:    c.Duration("heartbeat"),
				PIDFile:      c.String("pidfile"),
				LogFile:      c.String("log"),
				ErrorFile:    os.Getenv("TORCHELASTIC_ERROR_FILE"),
				Job:          c.String("job"),
				EnvFromStdin: c.Bool("env-stdin"),
				WatchWorkers: c.Bool("watch-workers"),
				Stdin:        c.App.Reader,
				Stdout:       c.App.Writer,
				Stderr:       c.App.ErrWriter,
				Subreaper:    true,
				WatchParent:  true,
			})
			if err != nil {
				return cli.Exit(err.Error(), code)
			}
			if code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// agentStopCommand is `drover agent stop --pidfile PATH`: it stops a group
// an earlier drover left behind and says so, or does nothing.
func agentStopCommand() *cli.Command {
	return &cli.Command{
		Name:  "stop",
		Usage: "stop the leftover process group a pidfile names, if it still runs",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pidfile", Required: true, Usage: "pidfile written by agent run"},
			&cli.DurationFlag{Name: "grace", Value: agent.DefaultGrace, Usage: "time between SIGTERM and SIGKILL"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent stop takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			msg, err := agent.StopLeftover(c.Context, c.String("pidfile"), c.Duration("grace"))
			if err != nil {
				return err
			}
			if msg != "" {
				fmt.Fprintln(c.App.Writer, msg)
			}
			return nil
		},
	}
}

// agentPreflightCommand is `drover agent preflight [--stop-leftovers DIR]
// [--route-to ADDR] [--port N]... -- [PROGRAM]`: run in the job's workdir
// and env before an attempt, it stops the groups an earlier drover left
// behind (one line each), names the interface toward ADDR, then fails with one line per problem when PROGRAM cannot be found
// or a port is taken.
func agentPreflightCommand() *cli.Command {
	return &cli.Command{
		Name:      "preflight",
		Usage:     "stop leftover groups, check that PROGRAM can be run here and the ports are free",
		ArgsUsage: "-- [PROGRAM]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "stop-leftovers", Usage: "first stop the leftover group of every pidfile in this directory"},
			&cli.DurationFlag{Name: "grace", Value: agent.DefaultGrace, Usage: "time between SIGTERM and SIGKILL for leftovers"},
			&cli.StringFlag{Name: "route-to", Usage: "print the network interface that reaches this address"},
			&cli.StringSliceFlag{Name: "port", Usage: "a TCP port that must be free (repeatable)"},
			&cli.BoolFlag{Name: "move-ports", Usage: "when a port is taken, print consecutive free ones instead of failing"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return cli.Exit("usage: drover agent preflight [--stop-leftovers DIR] [--port N]... [--move-ports] -- [PROGRAM]", exitConfig)
			}
			if dir := c.String("stop-leftovers"); dir != "" {
				stopped, err := agent.StopLeftovers(c.Context, dir, c.Duration("grace"))
				for _, msg := range stopped {
					fmt.Fprintf(c.App.Writer, "%s%s\n", agent.LeftoverPrefix, msg)
				}
				if err != nil {
					return cli.Exit(err.Error(), exitFailed)
				}
			}
			if addr := c.String("route-to"); addr != "" {
				if ifc := agent.RouteIface(c.Context, addr); ifc != "" {
					fmt.Fprintf(c.App.Writer, "%s%s\n", agent.IfacePrefix, ifc)
				}
			}
			program := c.Args().First()
			if c.Bool("move-ports") {
				base, err := agent.PreflightMove(program, c.StringSlice("port"))
				if err != nil {
					return cli.Exit(err.Error(), exitFailed)
				}
				if base > 0 {
					fmt.Fprintf(c.App.Writer, "%s%d\n", agent.FreePortsPrefix, base)
				}
				return nil
			}
			if err := agent.Preflight(program, c.StringSlice("port")); err != nil {
				return cli.Exit(err.Error(), exitFailed)
			}
			return nil
		},
	}
}

// agentSFTPCommand is `drover agent sftp [--low-priority]`: an SFTP server
// on stdin and stdout, through which drover copies checkpoints at low
// priority (agent.SFTPCommand).
func agentSFTPCommand() *cli.Command {
	return &cli.Command{
		Name:  "sftp",
		Usage: "serve SFTP on stdin and stdout",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "low-priority", Usage: "run at nice 19 and in the idle I/O class"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent sftp takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			if c.Bool("low-priority") {
				if err := agent.LowerPriority(); err != nil {
					return cli.Exit(err.Error(), exitFailed)
				}
			}
			if err := agent.ServeSFTP(c.App.Reader, os.Stdout); err != nil {
				return cli.Exit(err.Error(), exitFailed)
			}
			return nil
		},
	}
}
