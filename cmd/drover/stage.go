//go:build !droveragent

package main

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/stage"
)

// stageCommand is `drover stage JOB.toml [--verify]`: every [[data]] set
// onto every host of the job (spares too), as `drover run` does before
// its first attempt. It prints a line per data set and host and exits 1
// when any failed, 2 for a bad job file.
func stageCommand() *cli.Command {
	return &cli.Command{
		Name:      "stage",
		Usage:     "copy the job's [[data]] sets onto every host, host to host; unchanged files are skipped",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "stage only onto these hosts (comma-separated names)"},
			&cli.BoolFlag{Name: "verify", Usage: "rehash every staged file on every host and send again what differs"},
		),
		Action: func(c *cli.Context) error {
			cfg, hosts, err := loadJobHosts(c, false, true)
			if err != nil {
				return err
			}
			if len(cfg.Data) == 0 {
				fmt.Fprintln(c.App.Writer, "the job file has no [[data]] table: nothing to stage")
				return nil
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the drover binary to install on hosts: %w", err)
			}
			all, closeAll, err := stage.Connect(c.Context, append(slices.Clone(hosts), stageSources(cfg, hosts)...), dialOptions(c, cfg.Hosts), remote.FindAgents(bin))
			if err != nil {
				return cli.Exit(err.Error(), agent.ExitFailed)
			}
			defer closeAll()
			var mu sync.Mutex
			res, err := stage.Stage(c.Context, cfg.Data, all[:len(hosts)], all[len(hosts):], stage.Options{
				Verify: c.Bool("verify"), Rate: cfg.Job.DataCopyRate,
				Events: func(format string, args ...any) {
					mu.Lock()
					defer mu.Unlock()
					fmt.Fprintf(c.App.ErrWriter, format+"\n", args...)
				},
			})
			for _, r := range res {
				fmt.Fprintf(c.App.Writer, "%s: %s: %d files sent (%s), %d unchanged\n", r.Host, r.Set, r.Files, stage.HumanBytes(r.Bytes), r.Unchanged)
			}
			if err != nil {
				if c.Context.Err() != nil {
					return cli.Exit(fmt.Sprintf("stage interrupted: %v; the next drover stage resumes without sending the finished batches again", err), agent.ExitInterrupted)
				}
				return cli.Exit(err.Error(), agent.ExitFailed)
			}
			return nil
		},
	}
}

// stageSources are the source hosts of cfg's data sets that are not
// among hosts: connected too, to send.
func stageSources(cfg *config.Config, hosts []config.Host) []config.Host {
	var out []config.Host
	for _, d := range cfg.Data {
		if d.Local() || slices.ContainsFunc(hosts, func(h config.Host) bool { return h.Name == d.SourceHost }) ||
			slices.ContainsFunc(out, func(h config.Host) bool { return h.Name == d.SourceHost }) {
			continue
		}
		for _, h := range cfg.Hosts {
			if h.Name == d.SourceHost {
				out = append(out, h)
			}
		}
	}
	return out
}
