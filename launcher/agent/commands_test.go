package agent

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/gpulease"
)

// parseAgent parses argv (as Command and friends build it, binary first)
// with the agent's own CLI and returns the context the subcommand's
// action would get, without running the action.
func parseAgent(t *testing.T, argv []string) *cli.Context {
	t.Helper()
	agent := CLI()
	var got *cli.Context
	for _, sub := range agent.Subcommands {
		sub.Action = func(c *cli.Context) error { got = c; return nil }
	}
	app := &cli.App{Name: "drover", Commands: []*cli.Command{agent}, Writer: io.Discard, ErrWriter: io.Discard}
	require.NoError(t, app.RunContext(context.Background(), argv), "%q", argv)
	require.NotNil(t, got, "%q reached no subcommand", argv)
	return got
}

// Every argv the controller builds parses, with the agent's own flags,
// back into the options it was built from: one spec, two directions.
func TestAgentArgvRoundTrip(t *testing.T) {
	t.Run("run", func(t *testing.T) {
		o := RunOptions{Args: []string{"python3", "-u", "train.py", "--lr", "0.1"}, Grace: 7 * time.Second,
			Heartbeat: 6 * time.Second, PIDFile: "/w/.drover/pids/a.json", LogFile: "/w/.drover/logs/a.log", Job: "mnist",
			EnvFromStdin: true, WatchWorkers: true}
		c := parseAgent(t, Command("drover", o))
		assert.Equal(t, cmdRun, c.Command.Name)
		assert.Equal(t, o, runOptions(c))
	})
	t.Run("run in a container", func(t *testing.T) {
		o := RunOptions{Args: []string{"podman", "run", "--rm", "--name", "drover-j-a1-worker-0", "img", "sh", "w.sh"}, Grace: 2 * time.Second,
			Container: "drover-j-a1-worker-0", ContainerRuntime: "docker"}
		assert.Equal(t, o, runOptions(parseAgent(t, Command("drover", o))))
	})
	t.Run("run detached", func(t *testing.T) {
		o := RunOptions{Args: []string{"sh", "w.sh"}, Grace: 2 * time.Second, LogFile: "/w/.drover/runs/r1/attempt-2/worker-3.log",
			State: "/w/.drover/runs/r1/attempt-2/worker-3.json", RunID: "r1", Attempt: 2, Rank: 3, Name: "worker-3",
			ControllerTimeout: time.Hour}
		c := parseAgent(t, Command("drover", o))
		assert.Equal(t, o, runOptions(c))
	})
	t.Run("run with a record", func(t *testing.T) {
		o := RunOptions{Args: []string{"sh", "w.sh"}, Grace: 2 * time.Second, LogFile: "/w/.drover/logs/attempt-2/worker-3.log",
			Record: "/w/.drover/runs/r1/attempt-2/worker-3.json", RunID: "r1", Attempt: 2, Rank: 3, Name: "worker-3"}
		assert.Equal(t, o, runOptions(parseAgent(t, Command("drover", o))))
	})
	t.Run("attach", func(t *testing.T) {
		for _, o := range []AttachOptions{
			{State: "/w/s.json", From: 12345, Heartbeat: 6 * time.Second},
			{State: "/w/s.json", SetControllerTimeout: true, ControllerTimeout: 6 * time.Second},
			{State: "/w/s.json", SetControllerTimeout: true},
		} {
			c := parseAgent(t, AttachCommand("drover", o))
			assert.Equal(t, cmdAttach, c.Command.Name)
			assert.Equal(t, o, attachOptions(c))
		}
	})
	t.Run("since", func(t *testing.T) {
		c := parseAgent(t, SinceCommand("drover", 10*time.Minute, time.Time{}, []string{"/w/a.log", "/w/b.log"}))
		assert.Equal(t, cmdSince, c.Command.Name)
		assert.Equal(t, 10*time.Minute, c.Duration(flagAgo))
		assert.Equal(t, []string{"/w/a.log", "/w/b.log"}, c.Args().Slice())
		at := time.Date(2026, 3, 12, 12, 0, 0, 5, time.UTC)
		c = parseAgent(t, SinceCommand("drover", 0, at, []string{"/w/a.log"}))
		assert.True(t, at.Equal(*c.Timestamp(flagAt)), "%v", c.Timestamp(flagAt))
	})
	t.Run("runs", func(t *testing.T) {
		c := parseAgent(t, RunsCommand("drover", "/w", "r1"))
		assert.Equal(t, cmdRuns, c.Command.Name)
		assert.Equal(t, "/w", c.String(flagWorkdir))
		assert.Equal(t, "r1", c.String(flagRunID))
	})
	t.Run("run with a health watch", func(t *testing.T) {
		o := RunOptions{Args: []string{"true"}, Grace: time.Second, HealthFile: "/w/.drover/logs/attempt-1/health.json", HealthEvery: 2 * time.Second}
		assert.Equal(t, o, runOptions(parseAgent(t, Command("drover", o))))
	})
	t.Run("run holding GPU leases", func(t *testing.T) {
		o := RunOptions{Args: []string{"true"}, Grace: time.Second, GPULeases: []string{"/tmp/drover-gpus/GPU-a.1000.lease", "/tmp/drover-gpus/GPU-b.1000.lease"}}
		assert.Equal(t, o, runOptions(parseAgent(t, Command("drover", o))))
	})
	t.Run("gpu-lease", func(t *testing.T) {
		o := gpulease.HoldOptions{Dir: "/tmp/drover-gpus", Candidates: []gpulease.Candidate{{Index: 1, Key: "GPU-b"}, {Index: 0, Key: "GPU-a"}},
			N: 1, Min: 1, Queue: true, Hosts: 3,
			Me: gpulease.Holder{Job: "j", RunID: "20261129-060000-0123ab", Host: "ctl", PID: 42, Since: time.Date(2026, 11, 29, 6, 0, 0, 5, time.UTC)}}
		got, err := gpuLeaseOptions(parseAgent(t, GPULeaseCommand("drover", o)))
		require.NoError(t, err)
		got.Me.User, got.Me.UID = "", 0 // the host's to say
		assert.Equal(t, o, got)
	})
	t.Run("run defaults", func(t *testing.T) {
		o := RunOptions{Args: []string{"true"}}
		got := runOptions(parseAgent(t, Command("drover", o)))
		assert.Equal(t, DefaultGrace, got.Grace, "an unset grace is the agent's default")
		got.Grace = 0
		assert.Equal(t, o, got)
	})
	t.Run("stop", func(t *testing.T) {
		c := parseAgent(t, StopCommand("drover", "/w/.drover/pids/a.json", 3*time.Second))
		assert.Equal(t, cmdStop, c.Command.Name)
		assert.Equal(t, "/w/.drover/pids/a.json", c.String(flagPidfile))
		assert.Equal(t, 3*time.Second, c.Duration(flagGrace))
	})
	t.Run("preflight", func(t *testing.T) {
		o := PreflightOptions{Program: "python3", Ports: []string{"29500", "29501"}, MovePorts: true,
			Leftovers: "/w/.drover/pids", Grace: 4 * time.Second, RouteTo: "10.0.0.11"}
		c := parseAgent(t, PreflightCommand("drover", o))
		assert.Equal(t, cmdPreflight, c.Command.Name)
		assert.Equal(t, o, preflightOptions(c))
	})
	t.Run("preflight, nothing to check", func(t *testing.T) {
		got := preflightOptions(parseAgent(t, PreflightCommand("drover", PreflightOptions{})))
		assert.Equal(t, PreflightOptions{Grace: DefaultGrace}, got)
	})
	t.Run("probe", func(t *testing.T) {
		c := parseAgent(t, ProbeCommand("drover"))
		assert.Equal(t, cmdProbe, c.Command.Name)
		assert.True(t, c.Bool(flagJSON))
	})
	t.Run("recv", func(t *testing.T) {
		o := checkpoint.PeerRecv{Own: "/w/.drover/checkpoints", Seq: 12, Name: "step-20", Listen: "10.0.0.12",
			Forward: "10.0.0.13:40111", Part: "gpu-b", Wait: 9 * time.Second, LowPriority: true}
		c := parseAgent(t, RecvCommand("drover", o))
		assert.Equal(t, cmdRecv, c.Command.Name)
		assert.Equal(t, o, recvOptions(c))
		bare := checkpoint.PeerRecv{Own: "/o", Seq: 1, Name: "a.pt", Listen: "::1"}
		got := recvOptions(parseAgent(t, RecvCommand("drover", bare)))
		got.Wait = 0 // the agent's default
		assert.Equal(t, bare, got)
	})
	t.Run("send", func(t *testing.T) {
		o := checkpoint.PeerSend{Path: "/w/ck/step-20", Name: "step-20", To: "10.0.0.12:40110", Rate: 1 << 20, LowPriority: true}
		c := parseAgent(t, SendCommand("drover", o))
		assert.Equal(t, cmdSend, c.Command.Name)
		assert.Equal(t, o, sendOptions(c))
		bare := checkpoint.PeerSend{Path: "/w/a.pt", Name: "a.pt", To: "[::1]:5"}
		assert.Equal(t, bare, sendOptions(parseAgent(t, SendCommand("drover", bare))))
	})
	t.Run("health", func(t *testing.T) {
		c := parseAgent(t, HealthCommand("drover", 3*time.Second))
		assert.Equal(t, cmdHealth, c.Command.Name)
		assert.True(t, c.Bool(flagJSON))
		assert.Equal(t, 3*time.Second, c.Duration(flagXIDWait))
		assert.Zero(t, c.Duration(flagWatch))
	})
	t.Run("health watch", func(t *testing.T) {
		c := parseAgent(t, HealthWatchCommand("drover", "/w/health.json", 2*time.Second))
		assert.Equal(t, cmdHealth, c.Command.Name)
		assert.Equal(t, 2*time.Second, c.Duration(flagWatch))
		assert.Equal(t, "/w/health.json", c.String(flagOut))
	})
	t.Run("top", func(t *testing.T) {
		o := TopOptions{Workdir: "runs/mnist", Every: time.Second, Heartbeat: 10 * time.Second}
		c := parseAgent(t, TopCommand("drover", o))
		assert.Equal(t, cmdTop, c.Command.Name)
		assert.Equal(t, o, topOptions(c))
	})
	t.Run("net-listen", func(t *testing.T) {
		o := NetListenOptions{Iface: "eth0", Accept: 3, Timeout: time.Minute}
		c := parseAgent(t, NetListenCommand("drover", o))
		assert.Equal(t, cmdNetListen, c.Command.Name)
		assert.Equal(t, o, netListenOptions(c))
		o = NetListenOptions{Listen: "10.0.0.12", Timeout: time.Minute}
		assert.Equal(t, o, netListenOptions(parseAgent(t, NetListenCommand("drover", o))))
	})
	t.Run("net-send", func(t *testing.T) {
		o := NetSendOptions{To: "10.0.0.12:4000", Duration: 2 * time.Second}
		c := parseAgent(t, NetSendCommand("drover", o))
		assert.Equal(t, cmdNetSend, c.Command.Name)
		assert.Equal(t, o, netSendOptions(c))
	})
	t.Run("sftp", func(t *testing.T) {
		c := parseAgent(t, SFTPCommand("drover"))
		assert.Equal(t, cmdSFTP, c.Command.Name)
		assert.True(t, c.Bool(flagLowPriority))
	})
}

// UsageLine is made from the flags: every visible flag, its placeholder,
// required ones bare, repeatable ones marked, and the arguments last.
func TestUsageLine(t *testing.T) {
	var got []string
	for _, sub := range CLI().Subcommands {
		sub.HelpName = "drover agent " + sub.Name
		got = append(got, UsageLine(sub))
	}
	assert.Equal(t, []string{
		"usage: drover agent run [--grace DURATION] [--heartbeat DURATION] [--pidfile FILE] [--log FILE] [--job JOB] [--env-stdin] [--watch-workers] [--state FILE] [--record FILE] [--run-id ID] [--attempt N] [--rank N] [--name NAME] [--controller-timeout DURATION] [--attached] [--health-file FILE] [--health-every DURATION] [--gpu-lease FILE]... [--container NAME] [--container-runtime RUNTIME] -- CMD [ARGS...]",
		"usage: drover agent stop --pidfile FILE [--grace DURATION] [--kill]",
		"usage: drover agent preflight [--stop-leftovers DIR] [--lease FILE] [--lease-id ID] [--grace DURATION] [--route-to ADDR] [--port PORT]... [--move-ports] -- [PROGRAM]",
		"usage: drover agent probe [--json]",
		"usage: drover agent health [--json] [--xid-wait DURATION] [--watch INTERVAL] [--out FILE]",
		"usage: drover agent version",
		"usage: drover agent sftp [--low-priority]",
		"usage: drover agent top --workdir FILE [--every DURATION] [--heartbeat DURATION]",
		"usage: drover agent net-listen [--iface INTERFACE] [--listen ADDR] [--accept N] [--timeout DURATION]",
		"usage: drover agent net-send --to IP:PORT [--duration DURATION]",
		"usage: drover agent recv --dir DIR --seq N --name NAME --listen ADDR [--forward ADDR] [--part HOST] [--wait DURATION] [--idle DURATION] [--low-priority]",
		"usage: drover agent send --path PATH --name NAME --to ADDR [--rate BYTES] [--idle DURATION] [--low-priority]",
		"usage: drover agent attach --state FILE [--from OFFSET] [--heartbeat DURATION] [--controller-timeout DURATION]",
		"usage: drover agent runs [--workdir DIR] [--run-id ID]",
		"usage: drover agent since [--ago DURATION] [--at TIME] LOG...",
		"usage: drover agent gpu-lease [--dir DIR] [--gpu INDEX=UUID]... [--count N] [--min N] [--job JOB] [--run-id ID] [--controller-host HOST] [--controller-pid N] [--since TIME] [--queue] [--hosts N] [--list]",
		"usage: drover agent stacks --workdir DIR [--native] [--hook-only] [--wait DURATION] [--ras HOST:PORT]",
	}, got)
}
