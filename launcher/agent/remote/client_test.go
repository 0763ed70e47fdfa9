package remote

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
)

// argvTransport records the argv of every command started over it and
// answers each with answer on stdout, then exit 0.
type argvTransport struct {
	cluster.Transport // nil: only Host and Start are used
	answer            string
	argv              [][]string
}

func (f *argvTransport) Host() cluster.Endpoint { return cluster.Endpoint{Name: "h0"} }

func (f *argvTransport) Start(_ context.Context, cmd cluster.Cmd) (cluster.Process, error) {
	f.argv = append(f.argv, cmd.Args)
	if cmd.Stdin != nil {
		go func() { _, _ = io.Copy(io.Discard, cmd.Stdin) }()
	}
	if cmd.Stdout != nil {
		if f.answer != "" { // an empty write to a pipe waits for its reader
			_, _ = io.WriteString(cmd.Stdout, f.answer)
		}
		if c, ok := cmd.Stdout.(io.Closer); ok {
			_ = c.Close() // a pipe (the SFTP client's): its reader sees the end
		}
	}
	return doneProcess{}, nil
}

// TestClientArgv checks that each of Client's methods runs the agent
// command it names, with its options, on the binary at Path: the argv of
// package agent's builder for them.
func TestClientArgv(t *testing.T) {
	const bin = "/home/u/.drover/bin/drover-0123456789ab"
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	runO := agent.RunOptions{Job: "train", Grace: time.Second, Args: []string{"python", "train.py"}}
	attachO := agent.AttachOptions{State: "/w/state", From: 42, Heartbeat: 10 * time.Second}
	preO := agent.PreflightOptions{Leftovers: "/w/.drover/pids", Grace: time.Second, Program: "python"}
	topO := agent.TopOptions{Workdir: "/w", Every: time.Second, Heartbeat: 10 * time.Second}
	listenO := agent.NetListenOptions{Iface: "eth0", Accept: 3, Timeout: time.Minute}
	sendO := agent.NetSendOptions{To: "10.0.0.2:5000", Duration: 2 * time.Second}
	recvO, peerSendO := checkpoint.PeerRecv{}, checkpoint.PeerSend{}
	for _, tc := range []struct {
		name, verb string // verb: the agent command, argv[2]
		answer     string
		run        func(ctx context.Context, c Client) error
		want       []string
	}{
		{"Run", "run", "", func(ctx context.Context, c Client) error { _, err := c.Run(ctx, runO, cluster.Cmd{}); return err },
			agent.Command(bin, runO)},
		{"Attach", "attach", "", func(ctx context.Context, c Client) error { _, err := c.Attach(ctx, attachO, cluster.Cmd{}); return err },
			agent.AttachCommand(bin, attachO)},
		{"Preflight", "preflight", "", func(ctx context.Context, c Client) error { return c.Preflight(ctx, preO, cluster.Cmd{}) },
			agent.PreflightCommand(bin, preO)},
		{"Stop", "stop", "", func(ctx context.Context, c Client) error {
			return c.Stop(ctx, "/w/p.pid", time.Second, false, io.Discard)
		},
			agent.StopCommand(bin, "/w/p.pid", time.Second)},
		{"Stop kill", "stop", "", func(ctx context.Context, c Client) error {
			return c.Stop(ctx, "/w/p.pid", time.Second, true, io.Discard)
		},
			append(agent.StopCommand(bin, "/w/p.pid", time.Second), "--kill")},
		{"Runs", "runs", "{}", func(ctx context.Context, c Client) error { _, err := c.Runs(ctx, "/w", "r1"); return err },
			agent.RunsCommand(bin, "/w", "r1")},
		{"Since", "since", "[]", func(ctx context.Context, c Client) error {
			_, _, err := c.Since(ctx, time.Minute, at, []string{"a.log"})
			return err
		}, agent.SinceCommand(bin, time.Minute, at, []string{"a.log"})},
		{"Top", "top", "", func(ctx context.Context, c Client) error { _, err := c.Top(ctx, topO, cluster.Cmd{}); return err },
			agent.TopCommand(bin, topO)},
		{"NetListen", "net-listen", "", func(ctx context.Context, c Client) error {
			_, err := c.NetListen(ctx, listenO, cluster.Cmd{})
			return err
		}, agent.NetListenCommand(bin, listenO)},
		{"NetSend", "net-send", "", func(ctx context.Context, c Client) error { return c.NetSend(ctx, sendO, cluster.Cmd{}) },
			agent.NetSendCommand(bin, sendO)},
		{"SFTP", "sftp", "", func(ctx context.Context, c Client) error { _, _ = c.SFTP(ctx); return nil }, // no server: it fails
			agent.SFTPCommand(bin)},
		{"StartRecv", "recv", "", func(ctx context.Context, c Client) error {
			_, err := c.StartRecv(ctx, recvO, nil, nil, nil)
			return err
		}, agent.RecvCommand(bin, recvO)},
		{"StartSend", "send", "", func(ctx context.Context, c Client) error {
			_, err := c.StartSend(ctx, peerSendO, nil, nil, nil)
			return err
		}, agent.SendCommand(bin, peerSendO)},
		{"Health", "health", "{}", func(ctx context.Context, c Client) error { _, err := c.Health(ctx, 0); return err },
			agent.HealthCommand(bin, 0)},
		{"Probe", "probe", "{}", func(ctx context.Context, c Client) error { _, err := c.Probe(ctx); return err },
			agent.ProbeCommand(bin)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tr := &argvTransport{answer: tc.answer}
			require.NoError(t, tc.run(ctx, Client{T: tr, Path: bin}))
			require.Len(t, tr.argv, 1, "one command")
			assert.Equal(t, tc.want, tr.argv[0])
			require.GreaterOrEqual(t, len(tr.argv[0]), 3)
			assert.Equal(t, []string{bin, "agent", tc.verb}, tr.argv[0][:3], strings.Join(tr.argv[0], " "))
		})
	}
}
