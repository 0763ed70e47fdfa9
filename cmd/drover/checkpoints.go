//go:build !droveragent

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
)

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoints",
		Usage:     "list the job's restorable checkpoints: size, when drover saw each complete, which hosts (and the mirror) hold it now",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "log-dir", Usage: "the --log-dir that drover run was given (default: runs/ next to the job file)"},
			&cli.BoolFlag{Name: "all", Usage: "also list the checkpoints no place holds any more (the history)"},
			&cli.BoolFlag{Name: "offline", Usage: "do not ask the hosts: show the holders as drover last saw them"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c)
			}
			cfg, err := loadJob(c, false)
			if err != nil {
				return err
			}
			rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(launcher.LogRoot(cfg, c.String("log-dir")), cfg.Job.Name), cfg.Job.Name)
			if err != nil {
				return err
			}
			entries := rec.Entries()
			if !c.Bool("offline") && len(entries) > 0 {
				if entries, err = currentCheckpoints(c, cfg, rec); err != nil {
					return err
				}
			}
			return checkpoint.RenderListing(c.App.Writer, entries, c.Bool("all"), time.Local)
		},
	}
}

// currentCheckpoints asks every host of the job what it holds now
// (checkpoint.Current): a checkpoint the script deleted is not claimed.
// A host that cannot be reached is said on stderr and keeps what the
// record says.
func currentCheckpoints(c *cli.Context, cfg *config.Config, rec *checkpoint.Record) ([]checkpoint.Entry, error) {
	ctx := c.Context
	ts, errs := cluster.DialAll(ctx, config.Endpoints(cfg.Hosts), dialOptions(c, cfg.Hosts))
	var hosts []checkpoint.Host
	for i, h := range cfg.Hosts {
		if errs[i] != nil {
			fmt.Fprintf(c.App.ErrWriter, "drover: %s; its checkpoints are shown as drover last saw them\n", cluster.EscapeLines(errs[i].Error()))
			continue
		}
		defer ts[i].Close()
		ch, err := checkpointHost(ctx, ts[i], h, cfg.Job.CheckpointDir)
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "drover: %s: %s; its checkpoints are shown as drover last saw them\n", h.Name, cluster.Escape(err.Error()))
			continue
		}
		hosts = append(hosts, ch)
	}
	j := cfg.Job
	set := checkpoint.Settings{Marker: j.CheckpointMarker, Mirror: j.CheckpointMirror, Layout: j.CheckpointLayout}
	warn := func(format string, args ...any) {
		fmt.Fprintln(c.App.ErrWriter, "drover:", cluster.Escape(fmt.Sprintf(format, args...)))
	}
	return checkpoint.Current(ctx, rec, hosts, set, warn)
}

// checkpointHost is host h as the checkpoint listing reads it: its file
// access, its checkpoint_dir and drover's copies, absolute.
func checkpointHost(ctx context.Context, t cluster.Transport, h config.Host, dir string) (checkpoint.Host, error) {
	fsys, err := t.FS(ctx)
	if err != nil {
		return checkpoint.Host{}, fmt.Errorf("open its files: %w", err)
	}
	home, err := fsys.Home()
	if err != nil {
		return checkpoint.Host{}, fmt.Errorf("find its home directory: %w", err)
	}
	wd := hostio.Abs(home, h.Workdir)
	return checkpoint.Host{Name: h.Name, FS: fsys, Dir: hostio.Abs(wd, dir), Own: checkpoint.OwnDir(wd)}, nil
}
