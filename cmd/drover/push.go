package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
)

// pushCommand is `drover push JOB.toml`: it syncs the job's code directory
// to the workdir of every host, as `drover run` does before each attempt,
// so that a user can check what lands where (and how long it takes) before
// running. It prints one summary line per host and exits 1 when any host
// failed (after the others finished), 2 for a bad job file.
func pushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "sync the job's code directory to every host's workdir",
		ArgsUsage: "JOB.toml",
		Flags: withFleetFlags(
			&cli.StringFlag{Name: "hosts", Usage: "push only to these hosts (comma-separated names)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("usage: drover push [--inventory FILE] [--hosts h1,h2] [--accept-new-hosts] JOB.toml", exitConfig)
			}
			cfg, err := loadJob(c, false)
			if err != nil {
				return err
			}
			hosts, err := pickHosts(cfg.Hosts, c.String("hosts"), false)
			if err != nil {
				return cli.Exit(err.Error(), exitConfig)
			}
			return pushAll(c, cfg, hosts)
		},
	}
}

// pushOutcome is one host's push, printed in inventory order once all are
// done so that the output does not depend on which host finished first.
type pushOutcome struct {
	res push.Result
	err error
}

func pushAll(c *cli.Context, cfg *config.Config, hosts []config.Host) error {
	opts := push.Options{Exclude: cfg.Job.Exclude, CacheDir: cacheDir()}
	// The scan runs while the hosts are dialled (it is most of a push's
	// local work, and the handshakes are waiting on the hosts anyway). A
	// bad .droverignore or an escaping symlink stops the dials and is
	// reported alone, before anything is read or written on any host.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	var tree *push.Tree
	var scanErr error
	scanned := make(chan struct{})
	scanOpts := opts // opts gets the progress display below
	go func() {
		defer close(scanned)
		if tree, scanErr = push.ScanLocal(cfg.Job.Code, scanOpts); scanErr != nil {
			cancel()
		}
	}()
	display := push.NewDisplay(c.App.ErrWriter)
	opts.Progress = display.Update

	outcomes := make([]pushOutcome, len(hosts))
	cluster.DialEach(ctx, hosts, dialOptions(c, cfg.Hosts), func(i int, t cluster.Transport, err error) {
		h := hosts[i]
		label := fmt.Sprintf("%s (%s)", h.Name, h.Address)
		var fsys cluster.FS
		if t != nil {
			defer t.Close()
			// File access opens while the scan finishes (it reads
			// nothing and writes nothing; a failed scan cancels ctx).
			if fsys, err = t.FS(ctx); err != nil {
				err = fmt.Errorf("push to %s: open file access: %w", label, err)
			}
		}
		<-scanned
		switch {
		case scanErr != nil:
			return
		case err != nil:
			outcomes[i].err = err // names the host and address already
			return
		}
		outcomes[i].res, outcomes[i].err = push.Sync(ctx, fsys, label, tree, h.Workdir, opts)
	})
	display.Close()
	<-scanned
	if scanErr != nil {
		return scanErr
	}
	return reportPush(c.App.Writer, c.App.ErrWriter, hosts, outcomes, c.Context.Err() != nil)
}

// reportPush prints a summary line per pushed host (stdout) and every
// host's error and warnings (stderr), and turns failures into exit 1 (130
// when interrupted).
func reportPush(stdout, stderr io.Writer, hosts []config.Host, outcomes []pushOutcome, interrupted bool) error {
	failed := 0
	for i, h := range hosts {
		o := outcomes[i]
		for _, w := range o.res.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", h.Name, w)
		}
		if o.err != nil {
			failed++
			fmt.Fprintln(stderr, o.err)
			continue
		}
		fmt.Fprintf(stdout, "%s: %s\n", h.Name, o.res.Summary())
	}
	switch {
	case interrupted:
		return cli.Exit("push interrupted; hosts not finished keep their previous tree", exitInterrupted)
	case failed > 0:
		return cli.Exit(fmt.Sprintf("push failed on %d of %d %s (see above)", failed, len(hosts), plural(len(hosts), "host")), exitFailed)
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// cacheDir is where drover keeps what it can compute again (the push's
// digest cache): the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache on Linux), or none when there is no home to put it in.
func cacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "drover")
}
