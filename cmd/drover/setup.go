//go:build !droveragent

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/setup"
)

// setupCommand is `drover setup JOB.toml`: it pushes the code and runs
// the job's setup lines on every host, as `drover run` does before its
// first attempt, so that an environment can be built (or rebuilt with
// --force) ahead of a run. Hosts whose environment is current skip
// (package setup). It exits 1 when any host's setup failed, naming the
// host, its exit status and its last lines; 2 for a bad job file or a job
// without setup.
func setupCommand() *cli.Command {
	return &cli.Command{
		Name:      "setup",
		Usage:     "push the code and run the job's setup on every host",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "only these hosts (comma-separated names)"},
			&cli.BoolFlag{Name: "force", Usage: "run the setup even where it is current"},
		),
		Action: func(c *cli.Context) error {
			cfg, hosts, err := loadJobHosts(c, false, false)
			if err != nil {
				return err
			}
			if len(cfg.Job.Setup) == 0 {
				return cli.Exit(fmt.Sprintf("%s has no setup: add setup = [\"uv sync --frozen\"] under [job] (docs/environments.md)", cfg.Path), agent.ExitUsage)
			}
			if err := pushAll(c, cfg, hosts); err != nil {
				return err
			}
			logDir := filepath.Join(launcher.LogRoot(cfg, ""), fmt.Sprintf("%s-setup-%s", cfg.Job.Name, time.Now().Format("20060102-150405")))
			opts := setup.ForJob(cfg)
			opts.Force, opts.Out = c.Bool("force"), c.App.Writer
			if os.MkdirAll(logDir, 0o755) == nil {
				opts.LogDir = logDir
			}
			opts.Note = func(host string, d setup.Decision) {
				what := "skipped"
				if d.Run {
					what = "running it"
				}
				fmt.Fprintf(c.App.ErrWriter, "setup on %s: %s, %s\n", host, d.Why, what)
			}
			ctx, _, stop := twoStageInterrupt(c.Context, c.App.ErrWriter, "stopping the setup on every host")
			defer stop()
			_, err = setup.RunJob(ctx, cfg, hosts, dialOptions(c, cfg.Hosts), opts)
			switch {
			case ctx.Err() != nil:
				return cli.Exit("interrupted", agent.ExitInterrupted)
			case errors.As(err, new(*setup.Error)):
				return cli.Exit(err.Error(), 1)
			}
			return err
		},
	}
}
