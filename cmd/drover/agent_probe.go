package main

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
)

// agentProbeCommand is `drover agent probe`: this host's GPUs over NVML
// (agent.WriteProbe). drover runs it on each host with --json.
func agentProbeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "print this host's GPUs as read over NVML",
		Description: "Reads NVML on this host. With --json it prints the report drover's " +
			"`probe`, `plan` and `run` consume; without, a table.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent probe takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			return agent.WriteProbe(c.App.Writer, c.Bool("json"))
		},
	}
}

// agentHealthCommand is `drover agent health --json`: this host's GPUs
// with their health counters and the Xids of its kernel log
// (agent.WriteHealth). drover runs it before each attempt and every few
// seconds while one runs.
func agentHealthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "print this host's GPU health (ECC, remapped rows, throttling, PCIe link, Xids) as JSON",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON (the only format)"},
			&cli.DurationFlag{Name: "xid-wait", Usage: "listen this long for NVML's Xid events before answering"},
			&cli.DurationFlag{Name: "watch", Usage: "read again at this interval until stopped, writing each report to --out"},
			&cli.StringFlag{Name: "out", Usage: "with --watch: the file each report replaces"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent health takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			if every := c.Duration("watch"); every > 0 {
				if c.String("out") == "" {
					return cli.Exit("agent health --watch needs --out FILE", exitConfig)
				}
				ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
				defer stop()
				return agent.WatchHealth(ctx, c.String("out"), every)
			}
			return agent.WriteHealth(c.Context, c.App.Writer, c.Duration("xid-wait"))
		},
	}
}

// agentVersionCommand is `drover agent version`, which the installer runs
// once after an upload (see agent.Version).
func agentVersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print this drover's version and platform",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("agent version takes no arguments, got %q", c.Args().First()), exitConfig)
			}
			_, err := fmt.Fprintln(c.App.Writer, agent.Version())
			return err
		},
	}
}
