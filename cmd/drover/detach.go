//go:build !droveragent

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
)

// detachedChildEnv marks the background supervisor `drover run -d` starts
// (its value is unused); the child removes it from its environment first.
const detachedChildEnv = "DROVER_DETACHED_SUPERVISOR"

// readyFD is the descriptor on which the background supervisor says it is
// running ("ready RUNID LOGDIR").
const readyFD = 3

// detachedChild reports whether this process is the background
// supervisor of `drover run -d`, and forgets the mark.
func detachedChild() bool {
	_, ok := os.LookupEnv(detachedChildEnv)
	os.Unsetenv(detachedChildEnv)
	return ok
}

// startDetached is `drover run -d`: it starts the same command line again
// as the background supervisor (own session, no terminal, inside a
// systemd scope where logind would kill it at logout), shows its events
// until its first attempt runs, then prints how to follow and stop it and
// returns. A run that cannot start fails as it would in the foreground.
func startDetached(c *cli.Context) error {
	wrap, err := launcher.LogindGuard("/", currentUser())
	if err != nil {
		return cli.Exit(err.Error(), agent.ExitUsage)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the drover binary: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the background supervisor: %w", err)
	}
	argv := append(append(append([]string(nil), wrap...), self), os.Args[1:]...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), detachedChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("start the background supervisor: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the background supervisor %s: %w", strings.Join(argv, " "), err)
	}
	readyW.Close()
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(c.App.ErrWriter, out) }()
	return awaitReady(c, cmd, readyR, copied)
}

// awaitReady waits for the background supervisor's "ready" line; when the
// pipe closes without one, the supervisor ended and its status is ours.
// Ctrl-C meanwhile stops it (the run was not started yet).
func awaitReady(c *cli.Context, cmd *exec.Cmd, readyR *os.File, copied <-chan struct{}) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, interruptSignals()...)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	readyR.Close()
	f := strings.Fields(line)
	if len(f) == 3 && f[0] == "ready" {
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		fmt.Fprintln(c.App.Writer, launcher.DescribeDetached(f[1], c.Args().First()))
		fmt.Fprintf(c.App.Writer, "  supervisor: pid %d, output in %s\n", cmd.Process.Pid, filepath.Join(f[2], "supervisor.log"))
		return nil
	}
	err := cmd.Wait()
	<-copied
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return cli.Exit("", ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("background supervisor: %w", err)
	}
	return cli.Exit("drover run -d: the background supervisor exited before its first attempt ran", agent.ExitFailed)
}

// detachedReady is the background supervisor's launcher.RunOptions.Ready:
// from now on its output goes to supervisor.log in the run directory (the
// terminal that started it may be gone), and `drover run -d` is told.
func detachedReady(runID, logDir string) {
	f, err := os.OpenFile(filepath.Join(logDir, "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err == nil {
		_ = unix.Dup2(int(f.Fd()), 1)
		_ = unix.Dup2(int(f.Fd()), 2)
		f.Close()
	}
	ready := os.NewFile(readyFD, "ready")
	fmt.Fprintf(ready, "ready %s %s\n", runID, logDir)
	ready.Close()
}

// ignoreSIGPIPE keeps the background supervisor alive when the `drover
// run -d` that reads its output is gone before it is ready: Go dies of
// SIGPIPE on a write to fd 1 or 2 unless SIGPIPE is notified.
func ignoreSIGPIPE() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGPIPE)
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// onRun is the action of a command that reads a run from its hosts
// (status, stop, logs, attach): one JOB.toml argument, then what the
// hosts are read with.
func onRun(action func(c *cli.Context, o runview.InspectOptions) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() != 1 {
			return usage(c)
		}
		o, err := inspectOptions(c)
		if err != nil {
			return err
		}
		return action(c, o)
	}
}

// inspectOptions are what status, stop and logs need to read the hosts.
func inspectOptions(c *cli.Context) (runview.InspectOptions, error) {
	bin, err := os.Executable()
	if err != nil {
		return runview.InspectOptions{}, fmt.Errorf("find the drover binary to install on hosts: %w", err)
	}
	return runview.InspectOptions{JobPath: c.Args().First(), InventoryPath: c.String(flagInventory), Dial: dialOptions(c, nil), AgentBinary: bin}, nil
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the job's detached run as its hosts know it (from any machine; changes nothing)",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "json", Usage: "print the status as JSON"}),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			st, err := runview.Status(c.Context, o)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			runview.RenderStatus(c.App.Writer, st)
			return nil
		}),
	}
}

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop the job's detached run from any machine (SIGTERM, SIGKILL after stop_grace)",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "abort", Usage: "SIGKILL every process now"}),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			if err := runview.Stop(c.Context, o, c.Bool("abort"), c.App.ErrWriter); err != nil {
				return err
			}
			fmt.Fprintln(c.App.ErrWriter, "stopped: no process of the run is left")
			return nil
		}),
	}
}

func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print the detached run's logs from its hosts' own files",
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

func psCommand() *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list the detached runs this machine started or adopted; with --inventory, every live run on those hosts",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the runs as JSON"},
			&cli.StringFlag{Name: flagInventory, Aliases: []string{"i"}, TakesFile: true, Usage: "list the live runs found on the hosts of this inventory (or job) `FILE`"},
			&cli.BoolFlag{Name: flagAcceptNewHosts, Usage: "trust and record host keys not yet in known_hosts (like ssh accept-new)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgsHere(c); err != nil {
				return err
			}
			var rows []hostio.PsRow
			var err error
			if inv := c.String(flagInventory); inv != "" {
				bin, berr := os.Executable()
				if berr != nil {
					return fmt.Errorf("find the drover binary to install on hosts: %w", berr)
				}
				rows, err = runview.HostRuns(c.Context, inv, dialOptions(c, nil), bin)
			} else {
				rows, err = hostio.LocalRuns()
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if eerr := enc.Encode(rows); eerr != nil {
					return eerr
				}
			} else {
				runview.RenderPs(c.App.Writer, rows)
			}
			return err
		},
	}
}

// noArgsHere is the usage error of a command that takes no arguments.
func noArgsHere(c *cli.Context) error {
	if c.NArg() > 0 {
		return usage(c)
	}
	return nil
}

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "watch the job's detached run live (its lines and changes of state); Ctrl-C detaches only",
		ArgsUsage: "JOB.toml",
		Flags:     withFleetFlags(&cli.BoolFlag{Name: "history", Usage: "print the current attempt's lines so far first"}, sinceFlag()),
		Action: onRun(func(c *cli.Context, o runview.InspectOptions) error {
			since, err := parseSince(c)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, interruptSignals()...)
			defer stop()
			lo := runview.LogsOptions{Follow: true, FromEnd: !c.Bool("history") && !since.Set(), Events: c.App.ErrWriter,
				Since: since, Notices: c.App.ErrWriter}
			err = runview.Logs(ctx, o, lo, c.App.Writer)
			if ctx.Err() != nil {
				job := c.Args().First()
				fmt.Fprintf(c.App.ErrWriter, "detached; the run goes on\n  re-attach: drover attach %s\n  stop:      drover stop %s\n", job, job)
				return nil
			}
			return err
		}),
	}
}
