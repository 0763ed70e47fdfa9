//go:build !droveragent

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
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
			&cli.BoolFlag{Name: "verify", Usage: "read back every pushed file and compare its SHA-256; repair what differs"},
		),
		Action: func(c *cli.Context) error {
			cfg, hosts, err := loadJobHosts(c, false, false)
			if err != nil {
				return err
			}
			return pushAll(c, cfg, hosts)
		},
	}
}

func pushAll(c *cli.Context, cfg *config.Config, hosts []config.Host) error {
	verify := push.VerifyNone
	if c.Bool("verify") {
		verify = push.VerifyContent
	}
	display := push.NewDisplay(c.App.ErrWriter)
	res, err := launcher.Push(c.Context, cfg, hosts, launcher.PushOptions{
		Dial:     dialOptions(c, cfg.Hosts),
		CacheDir: cacheDir(),
		Verify:   verify,
		Progress: display.Update,
	})
	display.Close()
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
	}
	return reportPush(c.App.Writer, c.App.ErrWriter, hosts, res.Hosts, c.Context.Err() != nil)
}

// reportPush prints a summary line per pushed host (stdout) and every
// host's error and warnings (stderr), and turns failures into exit 1 (130
// when interrupted).
func reportPush(stdout, stderr io.Writer, hosts []config.Host, outcomes []launcher.PushOutcome, interrupted bool) error {
	failed := 0
	for i, h := range hosts {
		o := outcomes[i]
		for _, w := range o.Result.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", h.Name, w)
		}
		switch {
		case o.Err != nil:
			failed++
			fmt.Fprintln(stderr, o.Err)
		case o.Skipped != "":
			fmt.Fprintf(stdout, "%s: not pushed: %s\n", h.Name, o.Skipped)
		default:
			fmt.Fprintf(stdout, "%s: %s\n", h.Name, o.Result.Summary())
		}
	}
	switch {
	case interrupted:
		return cli.Exit(interruptedPush(hosts, outcomes), agent.ExitInterrupted)
	case failed > 0:
		return cli.Exit(fmt.Sprintf("push failed on %d of %d %s (see above)", failed, len(hosts), plural(len(hosts), "host")), agent.ExitFailed)
	}
	return nil
}

// interruptedPush says what an interrupted push left on the hosts, which
// is, per host, exactly one of: the new tree (its commit had begun, and a
// commit is finished whatever the signal), its previous tree (stopped
// before), or, only when the connection failed during the commit, a mix
// that the next push or run repairs.
func interruptedPush(hosts []config.Host, outcomes []launcher.PushOutcome) string {
	var done, kept, mixed []string
	for i, h := range hosts {
		var ce *push.CommitError
		switch err := outcomes[i].Err; {
		case err == nil:
			done = append(done, h.Name)
		case errors.As(err, &ce):
			mixed = append(mixed, h.Name)
		default:
			kept = append(kept, h.Name)
		}
	}
	parts := []string{}
	if len(done) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s the new tree", strings.Join(done, ", "), verb(len(done), "has", "have")))
	}
	if len(kept) > 0 {
		parts = append(parts, fmt.Sprintf("%s kept %s previous tree", strings.Join(kept, ", "), verb(len(kept), "its", "their")))
	}
	if len(mixed) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s a mix of previous and new files until the next push or run repairs %s",
			strings.Join(mixed, ", "), verb(len(mixed), "holds", "hold"), verb(len(mixed), "it", "them")))
	}
	return "push interrupted: " + strings.Join(parts, "; ")
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
