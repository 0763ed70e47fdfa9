//go:build !droveragent

package main

import (
	"fmt"
	"os/signal"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/runview"
)

func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print the job's run's logs (detached or foreground) from its hosts' own files",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "rank", Usage: "only these ranks (`3,5`)"},
			&cli.StringFlag{Name: "host", Usage: "only the processes on this host"},
			&cli.IntFlag{Name: "attempt", Usage: "this attempt (default: the newest)"},
			&cli.BoolFlag{Name: "previous", Usage: "the attempt before the newest"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing, across restarts, until the run ends"},
			sinceFlag(),
		),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			since, err := parseSince(c)
			if err != nil {
				return err
			}
			lo := runview.LogsOptions{Host: c.String("host"), Attempt: c.Int("attempt"), Previous: c.Bool("previous"), Follow: c.Bool("follow"),
				Since: since, Notices: c.App.ErrWriter}
			for _, s := range strings.Split(c.String("rank"), ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				n, err := strconv.Atoi(s)
				if err != nil || n < 0 {
					return cli.Exit(fmt.Sprintf("--rank %q: not a rank number", s), agent.ExitUsage)
				}
				lo.Ranks = append(lo.Ranks, n)
			}
			slices.Sort(lo.Ranks)
			ctx, stop := signal.NotifyContext(c.Context, interruptSignals()...)
			defer stop()
			return runview.Logs(ctx, o, lo, c.App.Writer)
		}),
	}
}

// sinceFlag is --since of logs and attach.
func sinceFlag() cli.Flag {
	return &cli.StringFlag{Name: "since", Usage: "only output newer than this: a duration back from now (`10m`) or an RFC3339 time"}
}

// parseSince reads --since (a usage error when malformed).
func parseSince(c *cli.Context) (runview.Since, error) {
	if !c.IsSet("since") {
		return runview.Since{}, nil
	}
	s, err := runview.ParseSince(c.String("since"))
	if err != nil {
		return s, cli.Exit(err.Error(), agent.ExitUsage)
	}
	return s, nil
}
