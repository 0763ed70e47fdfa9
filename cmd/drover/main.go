// Command drover launches and supervises distributed training jobs on a
// fleet of hosts reachable over SSH. This package is wiring only: one file
// per command (commands.go lists them; `run -d`'s detaching is detach.go,
// beside run.go), each turning flags into calls to cluster, gpu, launcher
// and launcher's packages (runview, top, netcheck, fanout); what several
// commands share has a file of its own (fleetflags.go, inspect.go, hosts.go,
// interrupt.go, pipe.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
)

func main() {
	startingHeap(startingHeapSize)
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without os.Exit, so tests can drive the whole CLI in-process.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), interruptSignals()...)
	defer stop()
	app := newApp(stdout, stderr)
	// urfave/cli reports an unknown command through CommandNotFound,
	// which cannot return an error, or else with its own status 3; the
	// documented status for a usage error is 2.
	var unknown error
	app.CommandNotFound = func(c *cli.Context, name string) {
		unknown = cli.Exit(fmt.Sprintf("unknown command %q (run '%s --help' for the list)", name, c.Command.HelpName), agent.ExitUsage)
	}
	err := app.RunContext(ctx, flagsFirst(app, args))
	if unknown != nil {
		err = unknown
	}
	return exitCode(err, stderr)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                 "drover",
		Usage:                "launch and supervise distributed training on a fleet of SSH hosts",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		// Errors are printed once, by exitCode, never by urfave/cli itself.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       commands(),
		// Not urfave/cli's own --version, which prints through a
		// package-level printer: drover's says more (printVersion).
		Flags: []cli.Flag{&cli.BoolFlag{Name: "version", Usage: "print the version (as `drover version`)"}},
		Action: func(c *cli.Context) error {
			if c.Bool("version") {
				return printVersion(c)
			}
			if c.NArg() > 0 {
				// With an app Action, urfave/cli hands an unknown
				// command to it as an argument.
				return cli.Exit(fmt.Sprintf("unknown command %q (run '%s --help' for the list)", c.Args().First(), c.App.Name), agent.ExitUsage)
			}
			return cli.ShowAppHelp(c)
		},
	}
	app.OnUsageError = usageError
	setUsageError(app.Commands)
	return app
}

// usageError makes a bad flag or argument a usage error: exit status 2,
// like a configuration error, with urfave/cli's message.
func usageError(_ *cli.Context, err error, _ bool) error {
	return cli.Exit(err.Error(), agent.ExitUsage)
}

func setUsageError(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = usageError
		}
		setUsageError(c.Subcommands)
	}
}

// usage is the usage error of the command c runs: its one-line usage,
// made from its flags (agent.UsageLine), and exit status 2.
func usage(c *cli.Context) error {
	return cli.Exit(agent.UsageLine(c.Command), agent.ExitUsage)
}

// exitCode prints err (once) and maps it to drover's exit statuses:
// 2 for a configuration or usage error, the carried code for cli.ExitCoder,
// 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return agent.ExitOK
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "drover:", cluster.EscapeLines(msg))
		}
		return ce.ExitCode()
	}
	if config.IsConfigError(err) {
		// Errors the plan found know their key, not its line.
		err = config.LocateLines(err)
	}
	// An error may quote a host: no control character of it reaches the
	// terminal, though its lines stay lines.
	fmt.Fprintln(stderr, "drover:", cluster.EscapeLines(err.Error()))
	if config.IsConfigError(err) {
		return agent.ExitUsage
	}
	return agent.ExitFailed
}

// flagsFirst moves a command's flags in front of its positional arguments,
// so that `drover run job.toml --quiet` means what it says: urfave/cli v2
// stops parsing flags at the first positional argument and would otherwise
// silently treat --quiet as a second argument. Everything after "--" is left
// alone (it is the remote command of drover exec or drover agent run).
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags come first; then walk down the command tree.
	cmds := app.Commands
	var cmd *cli.Command
	for len(rest) > 0 {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(rest[0]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd = next
		out = append(out, rest[0])
		rest = rest[1:]
		cmds = cmd.Subcommands
	}
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	var flags, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if takesValue[name] && !hasValue && i+1 < len(rest) {
			i++
			flags = append(flags, rest[i])
		}
	}
	out = append(out, flags...)
	return append(out, pos...)
}
