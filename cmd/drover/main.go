// Command drover launches and supervises distributed training jobs on a
// fleet of hosts reachable over SSH. This package is wiring only: one file
// per command, each turning flags into calls to cluster, gpu and launcher.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
)

// Exit statuses shared by every command.
const (
	exitOK          = 0
	exitFailed      = 1
	exitConfig      = 2
	exitInterrupted = 130
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without os.Exit, so tests can drive the whole CLI in-process.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, args)
	return exitCode(err, stderr)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:                 "drover",
		Usage:                "launch and supervise distributed training on a fleet of SSH hosts",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		// Errors are printed once, by exitCode, never by urfave/cli itself.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			planCommand(),
			execCommand(),
			pushCommand(),
			probeCommand(),
			runCommand(),
			agentCommand(),
		},
	}
}

// exitCode prints err (once) and maps it to drover's exit statuses:
// 2 for a configuration or usage error, the carried code for cli.ExitCoder,
// 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "drover:", msg)
		}
		return ce.ExitCode()
	}
	fmt.Fprintln(stderr, "drover:", err)
	if cluster.IsConfigError(err) {
		return exitConfig
	}
	return exitFailed
}
