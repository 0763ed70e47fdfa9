package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/checkpoint"
)

// The agent's subcommands and flags are named here once. CLI declares the
// flags with these names and reads them into RunOptions and
// PreflightOptions; Command, StopCommand, PreflightCommand, ProbeCommand
// and SFTPCommand write the argv a controller sends with the same names
// from the same options, so the two sides cannot drift apart (a test
// parses every argv they build back into the options it was built from).
const (
	cmdAgent     = "agent"
	cmdRun       = "run"
	cmdStop      = "stop"
	cmdPreflight = "preflight"
	cmdProbe     = "probe"
	cmdHealth    = "health"
	cmdVersion   = "version"
	cmdSFTP      = "sftp"
	cmdSend      = "send"
	cmdRecv      = "recv"
	cmdTop       = "top"
	cmdNetListen = "net-listen"
	cmdNetSend   = "net-send"
	cmdStacks    = "stacks"
	flagNative   = "native"
	flagHookOnly = "hook-only"
	flagRAS      = "ras"

	flagGrace         = "grace"
	flagHeartbeat     = "heartbeat"
	flagPidfile       = "pidfile"
	flagLog           = "log"
	flagJob           = "job"
	flagStopLeftovers = "stop-leftovers"
	flagLease         = "lease"
	flagLeaseID       = "lease-id"
	flagRouteTo       = "route-to"
	flagPort          = "port"
	flagMovePorts     = "move-ports"
	flagJSON          = "json"
	flagLowPriority   = "low-priority"

	cmdAttach = "attach"
	cmdRuns   = "runs"
	cmdSince  = "since"
	flagAgo   = "ago"
	flagAt    = "at"

	flagState             = "state"
	flagRecord            = "record"
	flagRunID             = "run-id"
	flagAttempt           = "attempt"
	flagRank              = "rank"
	flagName              = "name"
	flagControllerTimeout = "controller-timeout"
	flagDetachedChild     = "detached-child"
	flagAttached          = "attached"
	flagFrom              = "from"
	flagWorkdir           = "workdir"
	flagKill              = "kill"
	flagEnvStdin          = "env-stdin"
	flagWatchWorkers      = "watch-workers"
	flagHealthFile        = "health-file"
	flagHealthEvery       = "health-every"
	flagContainer         = "container"
	flagContainerRuntime  = "container-runtime"
	flagXIDWait           = "xid-wait"
	flagWatch             = "watch"
	flagOut               = "out"
	flagEvery             = "every"
	flagIface             = "iface"
	flagAccept            = "accept"
	flagTimeout           = "timeout"
	flagTo                = "to"
	flagDuration          = "duration"
	flagDir               = "dir"
	flagSeq               = "seq"
	flagListen            = "listen"
	flagForward           = "forward"
	flagWait              = "wait"
	flagIdle              = "idle"
	flagPath              = "path"
	flagRate              = "rate"
	flagPart              = "part"
)

// CLI is `drover agent`: the commands drover runs on hosts over the
// transport. cmd/drover mounts it as it is. Hidden because people never
// type them.
func CLI() *cli.Command {
	return &cli.Command{
		Name:   cmdAgent,
		Usage:  "runs on hosts; used by drover itself",
		Hidden: true,
		Subcommands: []*cli.Command{
			runCLI(), stopCLI(), preflightCLI(), probeCLI(), healthCLI(), versionCLI(), sftpCLI(),
			topCLI(), netListenCLI(), netSendCLI(), recvCLI(), sendCLI(), attachCLI(), runsCLI(),
			sinceCLI(), gpuLeaseCLI(), stacksCLI(),
		},
	}
}

// graceFlag is --grace, which run, stop and preflight share.
func graceFlag(usage string) cli.Flag {
	return &cli.DurationFlag{Name: flagGrace, Value: DefaultGrace, Usage: usage}
}

// noArgs is the usage error of a subcommand that takes no arguments.
func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		name := strings.TrimPrefix(c.Command.HelpName, c.App.Name+" ")
		return cli.Exit(fmt.Sprintf("%s takes no arguments, got %q\n%s", name, c.Args().First(), UsageLine(c.Command)), ExitUsage)
	}
	return nil
}

// failedAction is the Action of a subcommand that takes no arguments and
// whose one error means exit 1 with the error's text.
func failedAction(run cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := noArgs(c); err != nil {
			return err
		}
		if err := run(c); err != nil {
			return cli.Exit(err.Error(), ExitFailed)
		}
		return nil
	}
}

// runCLI is `drover agent run -- CMD...`, the supervisor that keeps a
// training process from outliving the drover that started it (see Run for
// the stdin protocol).
func runCLI() *cli.Command {
	return &cli.Command{
		Name:      cmdRun,
		Usage:     "run CMD in its own process group and stop the group when drover goes away",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags: []cli.Flag{
			graceFlag("time between SIGTERM and SIGKILL"),
			&cli.DurationFlag{Name: flagHeartbeat, Usage: "stop when no line arrives on stdin for this long (0: off)"},
			&cli.StringFlag{Name: flagPidfile, TakesFile: true, Usage: "record the group here while it runs"},
			&cli.StringFlag{Name: flagLog, TakesFile: true, Usage: "also append all output to this file"},
			&cli.StringFlag{Name: flagJob, Usage: "job name, for the pidfile"},
			&cli.BoolFlag{Name: flagEnvStdin, Usage: "read CMD's environment (a JSON object) from the first line of stdin"},
			&cli.BoolFlag{Name: flagWatchWorkers, Usage: "report each exit of CMD's children (torchrun's workers); the first abnormal one fails the run"},
			&cli.StringFlag{Name: flagState, TakesFile: true, Usage: "run detached, recording the process's state in this file (see agent attach)"},
			&cli.StringFlag{Name: flagRecord, TakesFile: true, Usage: "without --state: record the process's start and exit status in this file, as --state does"},
			&cli.StringFlag{Name: flagRunID, Usage: "run `ID`, for the state file"},
			&cli.IntFlag{Name: flagAttempt, Usage: "attempt number, for the state file"},
			&cli.IntFlag{Name: flagRank, Usage: "rank, for the state file"},
			&cli.StringFlag{Name: flagName, Usage: "process name, for the state file"},
			&cli.DurationFlag{Name: flagControllerTimeout, Usage: "detached: stop after this long with no attach client (0: never)"},
			&cli.BoolFlag{Name: flagDetachedChild, Hidden: true, Usage: "the detached agent itself (set by the launcher)"},
			&cli.BoolFlag{Name: flagAttached, Usage: "with --" + flagState + ": record the process there but supervise it here, on this channel, as a foreground run's agent (it stops with its controller)"},
			&cli.StringFlag{Name: flagHealthFile, TakesFile: true, Usage: "also watch this host's GPU health, writing each read to this file"},
			&cli.DurationFlag{Name: flagHealthEvery, Usage: "how often --" + flagHealthFile + " is written (default 2s)"},
			&cli.StringSliceFlag{Name: flagGPULease, TakesFile: true, Usage: "hold this GPU lease `FILE` while the command runs (repeat)"},
			&cli.StringFlag{Name: flagContainer, Usage: "CMD runs the container `NAME`: stop it by name, remove it when the agent ends"},
			&cli.StringFlag{Name: flagContainerRuntime, Usage: "the `RUNTIME` of --" + flagContainer + " (podman, the default, or docker)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.Exit(UsageLine(c.Command), ExitUsage)
			}
			// SIGHUP too: the agent may hold a terminal when run by hand.
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
			defer stop()
			o := runOptions(c)
			if o.RunID != "" {
				if err := CheckRunID(o.RunID); err != nil {
					return cli.Exit(err.Error(), ExitUsage) // it names the index entry and the state file
				}
			}
			if o.State != "" && !o.Attached && !c.Bool(flagDetachedChild) {
				return exitWith(Launch(ctx, os.Args, o, c.App.Reader, c.App.Writer, c.App.ErrWriter))
			}
			o.ErrorFile = os.Getenv("TORCHELASTIC_ERROR_FILE")
			o.Stdin, o.Stdout, o.Stderr = c.App.Reader, c.App.Writer, c.App.ErrWriter
			o.Subreaper, o.WatchParent = true, true
			code, err := Run(ctx, o)
			if err != nil {
				return cli.Exit(err.Error(), code)
			}
			if code != 0 {
				return cli.Exit("", code)
			}
			return nil
		},
	}
}

// runOptions reads what `drover agent run`'s command line says: the
// fields Command writes.
func runOptions(c *cli.Context) RunOptions {
	return RunOptions{
		Args:      c.Args().Slice(),
		Grace:     c.Duration(flagGrace),
		Heartbeat: c.Duration(flagHeartbeat),
		PIDFile:   c.String(flagPidfile),
		LogFile:   c.String(flagLog),
		Job:       c.String(flagJob),

		EnvFromStdin:      c.Bool(flagEnvStdin),
		WatchWorkers:      c.Bool(flagWatchWorkers),
		HealthFile:        c.String(flagHealthFile),
		HealthEvery:       c.Duration(flagHealthEvery),
		Container:         c.String(flagContainer),
		ContainerRuntime:  c.String(flagContainerRuntime),
		State:             c.String(flagState),
		Record:            c.String(flagRecord),
		RunID:             c.String(flagRunID),
		Attempt:           c.Int(flagAttempt),
		Rank:              c.Int(flagRank),
		Name:              c.String(flagName),
		ControllerTimeout: c.Duration(flagControllerTimeout),
		Attached:          c.Bool(flagAttached),
		GPULeases:         c.StringSlice(flagGPULease),
	}
}

// exitWith ends a subcommand with code (nil for 0).
func exitWith(code int) error {
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// attachCLI is `drover agent attach --state FILE [--from OFFSET]`: a
// supervisor's channel to a detached process (Attach).
func attachCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdAttach,
		Usage: "stream a detached process's output from an offset and pass control lines to its agent",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagState, Required: true, TakesFile: true, Usage: "the process's state file"},
			&cli.Int64Flag{Name: flagFrom, Usage: "byte `OFFSET` in its log to stream from"},
			&cli.DurationFlag{Name: flagHeartbeat, Usage: "detach when no line arrives on stdin for this long (0: off)"},
			&cli.DurationFlag{Name: flagControllerTimeout, Usage: "from now on, the agent stops its group after this long with no attach client (0: never)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
			defer stop()
			return exitWith(Attach(ctx, attachOptions(c), c.App.Reader, c.App.Writer))
		},
	}
}

// attachOptions reads attach's flags (what AttachCommand writes).
func attachOptions(c *cli.Context) AttachOptions {
	return AttachOptions{State: c.String(flagState), From: c.Int64(flagFrom), Heartbeat: c.Duration(flagHeartbeat),
		SetControllerTimeout: c.IsSet(flagControllerTimeout), ControllerTimeout: c.Duration(flagControllerTimeout)}
}

// runsCLI is `drover agent runs`: what this host knows of detached runs,
// as JSON (HostReport), for drover status, stop, logs and ps.
func runsCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdRuns,
		Usage: "report the detached runs of a workdir, or of this host's index, as JSON",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagWorkdir, TakesFile: true, Usage: "report the newest run of this workdir `DIR` (default: every live run in ~/.drover/live)"},
			&cli.StringFlag{Name: flagRunID, Usage: "report this run `ID` instead of the newest"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if id := c.String(flagRunID); id != "" {
				if err := CheckRunID(id); err != nil {
					return cli.Exit(err.Error(), ExitUsage) // it names a directory of the workdir
				}
			}
			rep, err := Report(c.String(flagWorkdir), c.String(flagRunID))
			if err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			enc := json.NewEncoder(c.App.Writer)
			return enc.Encode(rep)
		},
	}
}

// sinceCLI is `drover agent since (--ago D | --at TIME) LOG...`: where
// each log's output newer than a time starts, from its time index, as
// JSON (a SinceResult per log). --ago is counted back from this host's
// clock, so that a cut by duration does not depend on the controller's.
func sinceCLI() *cli.Command {
	return &cli.Command{
		Name:      cmdSince,
		Usage:     "print where each log's output newer than a time starts, as JSON",
		ArgsUsage: "LOG...",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: flagAgo, Usage: "output newer than this long ago, by this host's clock"},
			&cli.TimestampFlag{Name: flagAt, Layout: time.RFC3339Nano, Usage: "output newer than this RFC3339 `TIME`"},
		},
		Action: func(c *cli.Context) error {
			t := time.Now().Add(-c.Duration(flagAgo))
			if at := c.Timestamp(flagAt); at != nil {
				t = *at
			}
			out := []SinceResult{}
			for _, log := range c.Args().Slice() {
				out = append(out, SinceOffset(log, t))
			}
			return json.NewEncoder(c.App.Writer).Encode(out)
		},
	}
}

// SinceCommand returns the argv of `drover agent since` for logs: ago
// back from the host's clock, or at when ago is 0.
func SinceCommand(binary string, ago time.Duration, at time.Time, logs []string) []string {
	args := []string{binary, cmdAgent, cmdSince}
	if ago > 0 {
		args = append(args, "--"+flagAgo, ago.String())
	} else {
		args = append(args, "--"+flagAt, at.UTC().Format(time.RFC3339Nano))
	}
	return append(append(args, "--"), logs...)
}

// stopCLI is `drover agent stop --pidfile PATH`: it stops a group an
// earlier drover left behind and says so, or does nothing.
func stopCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdStop,
		Usage: "stop the leftover process group a pidfile names, if it still runs",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagPidfile, Required: true, TakesFile: true, Usage: "pidfile written by agent run"},
			graceFlag("time between SIGTERM and SIGKILL"),
			&cli.BoolFlag{Name: flagKill, Usage: "SIGKILL the group at once (drover stop --abort)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool(flagKill) {
				killLeftoverGroup(c.String(flagPidfile))
			}
			msg, err := StopLeftover(c.Context, c.String(flagPidfile), c.Duration(flagGrace))
			if err != nil {
				return err
			}
			if msg != "" {
				fmt.Fprintln(c.App.Writer, msg)
			}
			return nil
		},
	}
}

// preflightCLI is `drover agent preflight`: run in the job's workdir and
// env before an attempt, it stops the groups an earlier drover left
// behind (one line each), names the interface toward --route-to, then
// fails with one line per problem when PROGRAM cannot be found or a port
// is taken (see PreflightCommand).
func preflightCLI() *cli.Command {
	return &cli.Command{
		Name:      cmdPreflight,
		Usage:     "stop leftover groups, check that PROGRAM can be run here and the ports are free",
		ArgsUsage: "-- [PROGRAM]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagStopLeftovers, TakesFile: true, Usage: "first stop the leftover group of every pidfile in this `DIR`"},
			&cli.StringFlag{Name: flagLease, TakesFile: true, Usage: "stop leftovers only while this lease link `FILE` holds --lease-id's lease"},
			&cli.StringFlag{Name: flagLeaseID, Usage: "the run `ID` that must hold --lease"},
			graceFlag("time between SIGTERM and SIGKILL for leftovers"),
			&cli.StringFlag{Name: flagRouteTo, Usage: "print the network interface that reaches this `ADDR`"},
			&cli.StringSliceFlag{Name: flagPort, Usage: "a TCP `PORT` that must be free (repeatable)"},
			&cli.BoolFlag{Name: flagMovePorts, Usage: "when a port is taken, print consecutive free ones instead of failing"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return cli.Exit(UsageLine(c.Command), ExitUsage)
			}
			return preflightAction(c, preflightOptions(c))
		},
	}
}

// preflightOptions reads what `drover agent preflight`'s command line
// says: the fields PreflightCommand writes.
func preflightOptions(c *cli.Context) PreflightOptions {
	return PreflightOptions{
		Program:   c.Args().First(),
		Ports:     c.StringSlice(flagPort),
		MovePorts: c.Bool(flagMovePorts),
		Leftovers: c.String(flagStopLeftovers),
		Grace:     c.Duration(flagGrace),
		RouteTo:   c.String(flagRouteTo),
		Lease:     c.String(flagLease),
		LeaseID:   c.String(flagLeaseID),
	}
}

// preflightAction does what o says, in that order: leftovers, the route,
// then the program and ports.
func preflightAction(c *cli.Context, o PreflightOptions) error {
	if o.Leftovers != "" {
		if o.Lease != "" {
			if ours, holds := CheckLease(o.Lease, o.LeaseID); !ours {
				fmt.Fprintf(c.App.Writer, "%s%s\n", LeaseTakenPrefix, holds)
				return cli.Exit(fmt.Sprintf("not stopping leftovers in %s: the workdir lease %s is no longer this run's", o.Leftovers, o.Lease), ExitFailed)
			}
		}
		stopped, err := StopLeftovers(c.Context, o.Leftovers, o.Grace)
		for _, msg := range stopped {
			fmt.Fprintf(c.App.Writer, "%s%s\n", LeftoverPrefix, msg)
		}
		if err != nil {
			return cli.Exit(err.Error(), ExitFailed)
		}
	}
	if o.RouteTo != "" {
		if ifc := RouteIface(c.Context, o.RouteTo); ifc != "" {
			fmt.Fprintf(c.App.Writer, "%s%s\n", IfacePrefix, ifc)
		}
	}
	if o.MovePorts {
		base, err := PreflightMove(o.Program, o.Ports)
		if err != nil {
			return cli.Exit(err.Error(), ExitFailed)
		}
		if base > 0 {
			fmt.Fprintf(c.App.Writer, "%s%d\n", FreePortsPrefix, base)
		}
		return nil
	}
	if err := Preflight(o.Program, o.Ports); err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	return nil
}

// probeCLI is `drover agent probe`: this host's GPUs over NVML
// (WriteProbe). drover runs it on each host with --json.
func probeCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdProbe,
		Usage: "print this host's GPUs as read over NVML",
		Description: "Reads NVML on this host. With --json it prints the report drover's " +
			"`probe`, `plan` and `run` consume; without, a table.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagJSON, Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return WriteProbe(c.App.Writer, c.Bool(flagJSON))
		},
	}
}

// healthCLI is `drover agent health`: this host's GPUs with their health
// counters and the Xids of its kernel log (WriteHealth), which drover
// reads before each attempt; with --watch, the same every interval into a
// file (WatchHealth), which the agent of a host's first GPU process runs
// while the job does.
func healthCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdHealth,
		Usage: "print this host's GPU health (ECC, remapped rows, throttling, PCIe link, Xids) as JSON",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagJSON, Usage: "print the report as JSON (the only format)"},
			&cli.DurationFlag{Name: flagXIDWait, Usage: "listen this long for NVML's Xid events before answering"},
			&cli.DurationFlag{Name: flagWatch, Usage: "read again every `INTERVAL` until stopped, writing each report to --" + flagOut},
			&cli.StringFlag{Name: flagOut, TakesFile: true, Usage: "with --" + flagWatch + ": the `FILE` each report replaces"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			every := c.Duration(flagWatch)
			if every <= 0 {
				return WriteHealth(c.Context, c.App.Writer, c.Duration(flagXIDWait))
			}
			if c.String(flagOut) == "" {
				return cli.Exit("--"+flagWatch+" needs --"+flagOut+"\n"+UsageLine(c.Command), ExitUsage)
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer stop()
			if err := WatchHealth(ctx, c.String(flagOut), every); err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			return nil
		},
	}
}

// versionCLI is `drover agent version`, which the installer runs once
// after an upload (see Version).
func versionCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdVersion,
		Usage: "print this drover's version and platform",
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			_, err := fmt.Fprintln(c.App.Writer, Version())
			return err
		},
	}
}

// sftpCLI is `drover agent sftp [--low-priority]`: an SFTP server on stdin
// and stdout, through which drover copies checkpoints at low priority
// (SFTPCommand).
func sftpCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdSFTP,
		Usage: "serve SFTP on stdin and stdout",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagLowPriority, Usage: "run at nice 19 and in the idle I/O class"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Bool(flagLowPriority) {
				if err := LowerPriority(); err != nil {
					return cli.Exit(err.Error(), ExitFailed)
				}
			}
			if err := ServeSFTP(c.App.Reader, os.Stdout); err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			return nil
		},
	}
}

// topCLI is `drover agent top --workdir DIR [--every 1s]`: this host's
// GPUs and the job's processes as JSON lines, one per interval while
// stdin stays open (see Top). `drover top` runs it on every host.
func topCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdTop,
		Usage: "print this host's GPUs and the job's processes as JSON, every interval",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagWorkdir, Required: true, TakesFile: true, Usage: "the job's workdir on this host"},
			&cli.DurationFlag{Name: flagEvery, Usage: "print a sample this often until stdin ends (0: one sample)"},
			&cli.DurationFlag{Name: flagHeartbeat, Usage: "stop when no byte arrives on stdin for this long (0: off)"},
		},
		Action: failedAction(func(c *cli.Context) error {
			return Top(c.Context, topOptions(c), c.App.Reader, c.App.Writer)
		}),
	}
}

// topOptions reads what `drover agent top`'s command line says: the
// fields TopCommand writes.
func topOptions(c *cli.Context) TopOptions {
	return TopOptions{Workdir: c.String(flagWorkdir), Every: c.Duration(flagEvery), Heartbeat: c.Duration(flagHeartbeat)}
}

// recvCLI is `drover agent recv`: one direct checkpoint copy into
// drover's copy area, from a sender that knows the one-time token on
// stdin (RecvCommand; see checkpoint.ReceiveDirect).
func recvCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdRecv,
		Usage: "receive one checkpoint copy from another host's agent",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagDir, Required: true, TakesFile: true, Usage: "drover's copy area (`DIR`)"},
			&cli.IntFlag{Name: flagSeq, Required: true, Usage: "the checkpoint's number in drover's record"},
			&cli.StringFlag{Name: flagName, Required: true, Usage: "the checkpoint's `NAME`"},
			&cli.StringFlag{Name: flagListen, Required: true, Usage: "listen on this `ADDR` (port chosen by the kernel)"},
			&cli.StringFlag{Name: flagForward, Usage: "forward the copy to the receiver at `ADDR` as it arrives"},
			&cli.StringFlag{Name: flagPart, Usage: "the copy is `HOST`'s part of a sharded checkpoint"},
			&cli.DurationFlag{Name: flagWait, Value: 20 * time.Second, Usage: "give up when no sender came within this long"},
			&cli.DurationFlag{Name: flagIdle, Usage: "give up when the stream does not move for this long (0: 45s)"},
			&cli.BoolFlag{Name: flagLowPriority, Usage: "run at nice 19 and in the idle I/O class"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return recvAction(c, recvOptions(c))
		},
	}
}

// recvOptions reads what RecvCommand wrote.
func recvOptions(c *cli.Context) checkpoint.PeerRecv {
	return checkpoint.PeerRecv{Own: c.String(flagDir), Seq: c.Int(flagSeq), Name: c.String(flagName),
		Listen: c.String(flagListen), Forward: c.String(flagForward), Part: c.String(flagPart), Wait: c.Duration(flagWait), Idle: c.Duration(flagIdle), LowPriority: c.Bool(flagLowPriority)}
}

// sendCLI is `drover agent send`: one direct checkpoint copy to the
// receiver at --to, which must prove the token on stdin (SendCommand).
func sendCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdSend,
		Usage: "send one checkpoint to another host's agent",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagPath, Required: true, TakesFile: true, Usage: "the checkpoint file or directory (`PATH`)"},
			&cli.StringFlag{Name: flagName, Required: true, Usage: "the checkpoint's `NAME`"},
			&cli.StringFlag{Name: flagTo, Required: true, Usage: "the receiver's `ADDR`"},
			&cli.Int64Flag{Name: flagRate, Usage: "read at most this many `BYTES` per second (0: no cap)"},
			&cli.DurationFlag{Name: flagIdle, Usage: "give up when the receiver does not move for this long (0: 45s)"},
			&cli.BoolFlag{Name: flagLowPriority, Usage: "run at nice 19 and in the idle I/O class"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return sendAction(c, sendOptions(c))
		},
	}
}

// sendOptions reads what SendCommand wrote.
func sendOptions(c *cli.Context) checkpoint.PeerSend {
	return checkpoint.PeerSend{Path: c.String(flagPath), Name: c.String(flagName), To: c.String(flagTo),
		Rate: c.Int64(flagRate), Idle: c.Duration(flagIdle), LowPriority: c.Bool(flagLowPriority)}
}

// RecvCommand is the argv of `drover agent recv` for o.
func RecvCommand(binary string, o checkpoint.PeerRecv) []string {
	args := []string{binary, cmdAgent, cmdRecv, "--" + flagDir, o.Own, "--" + flagSeq, strconv.Itoa(o.Seq),
		"--" + flagName, o.Name, "--" + flagListen, o.Listen}
	if o.Forward != "" {
		args = append(args, "--"+flagForward, o.Forward)
	}
	if o.Part != "" {
		args = append(args, "--"+flagPart, o.Part)
	}
	if o.Wait > 0 {
		args = append(args, "--"+flagWait, o.Wait.String())
	}
	if o.Idle > 0 {
		args = append(args, "--"+flagIdle, o.Idle.String())
	}
	if o.LowPriority {
		args = append(args, "--"+flagLowPriority)
	}
	return args
}

// SendCommand is the argv of `drover agent send` for o.
func SendCommand(binary string, o checkpoint.PeerSend) []string {
	args := []string{binary, cmdAgent, cmdSend, "--" + flagPath, o.Path, "--" + flagName, o.Name, "--" + flagTo, o.To}
	if o.Rate > 0 {
		args = append(args, "--"+flagRate, strconv.FormatInt(o.Rate, 10))
	}
	if o.Idle > 0 {
		args = append(args, "--"+flagIdle, o.Idle.String())
	}
	if o.LowPriority {
		args = append(args, "--"+flagLowPriority)
	}
	return args
}

// stacksCLI is `drover agent stacks --workdir DIR`: the Python stack of
// every live process of the workdir's groups, as JSON (StacksReport), for
// drover stacks and the hang verdict. Nothing is stopped.
func stacksCLI() *cli.Command {
	return &cli.Command{
		Name:  cmdStacks,
		Usage: "print the Python stack of every live process of a workdir's groups, as JSON",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagWorkdir, Required: true, TakesFile: true, Usage: "the workdir `DIR` whose groups' stacks to take"},
			&cli.BoolFlag{Name: flagNative, Usage: "native frames too (py-spy only)"},
			&cli.BoolFlag{Name: flagHookOnly, Usage: "through drover's hook only, never py-spy"},
			&cli.DurationFlag{Name: flagWait, Usage: "bound each process's dump (default 10s)"},
			&cli.StringFlag{Name: flagRAS, Usage: "also ask NCCL's RAS service at `HOST:PORT` (NCCL_RAS_ADDR) for its status"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			rep, err := Stacks(c.Context, StacksOptions{Workdir: c.String(flagWorkdir), Native: c.Bool(flagNative), HookOnly: c.Bool(flagHookOnly), Wait: c.Duration(flagWait), RAS: c.String(flagRAS)})
			if err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			return json.NewEncoder(c.App.Writer).Encode(rep)
		},
	}
}
