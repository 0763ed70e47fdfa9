package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/gpulease"
)

// Client runs the agent's commands on one host: the controller's one
// place that turns a command's options into its argv (with package
// agent's builders, which own the flags) and runs it over the transport.
// A method that starts a command takes the caller's streams, directory
// and environment in a cluster.Cmd (its Args are the method's to set) and
// returns the process; one whose answer is read whole reads it bounded
// (Read): a host is not trusted, and what it prints must not become
// drover's memory.
type Client struct {
	T    cluster.Transport
	Path string // the drover binary on T's host (Install's answer)
}

// start starts args with cmd's streams, directory and environment.
func (c Client) start(ctx context.Context, args []string, cmd cluster.Cmd) (cluster.Process, error) {
	cmd.Args = args
	return c.T.Start(ctx, cmd)
}

// Run starts `drover agent run` for o: a process of the job.
func (c Client) Run(ctx context.Context, o agent.RunOptions, cmd cluster.Cmd) (cluster.Process, error) {
	return c.start(ctx, agent.Command(c.Path, o), cmd)
}

// Attach starts `drover agent attach`: the link to a detached process.
func (c Client) Attach(ctx context.Context, o agent.AttachOptions, cmd cluster.Cmd) (cluster.Process, error) {
	return c.start(ctx, agent.AttachCommand(c.Path, o), cmd)
}

// Preflight runs `drover agent preflight` for o to its end (RunToEnd).
func (c Client) Preflight(ctx context.Context, o agent.PreflightOptions, cmd cluster.Cmd) error {
	cmd.Args = agent.PreflightCommand(c.Path, o)
	return RunToEnd(ctx, c.T, cmd)
}

// Stop runs `drover agent stop` for the group in pidfile to its end
// (SIGTERM, SIGKILL after grace; kill: SIGKILL now), both its streams
// into out.
func (c Client) Stop(ctx context.Context, pidfile string, grace time.Duration, kill bool, out io.Writer) error {
	args := agent.StopCommand(c.Path, pidfile, grace)
	if kill {
		args = append(args, "--kill")
	}
	return RunToEnd(ctx, c.T, cluster.Cmd{Args: args, Stdout: out, Stderr: out})
}

// Runs reads `drover agent runs`: the newest run (or runID) of workdir,
// or with workdir "" the host's index of live runs. A failed command's
// error ends with what it said on stderr.
func (c Client) Runs(ctx context.Context, workdir, runID string) (*agent.HostReport, error) {
	out, said, err := Read(ctx, c.T, agent.RunsCommand(c.Path, workdir, runID), "drover agent runs", hostReportLimit)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, said)
	}
	var rep agent.HostReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Since reads `drover agent since`'s answer for logs whole (bounded), and
// what the command said on stderr when it failed: the caller checks the
// answer against the logs it asked about.
func (c Client) Since(ctx context.Context, ago time.Duration, at time.Time, logs []string) (out []byte, said string, err error) {
	return Read(ctx, c.T, agent.SinceCommand(c.Path, ago, at, logs), "drover agent since", sinceLimit)
}

// Top starts `drover agent top`: a stream of samples, one JSON line each.
func (c Client) Top(ctx context.Context, o agent.TopOptions, cmd cluster.Cmd) (cluster.Process, error) {
	return c.start(ctx, agent.TopCommand(c.Path, o), cmd)
}

// NetListen starts `drover agent net-listen`, the receiving end of a link
// measure.
func (c Client) NetListen(ctx context.Context, o agent.NetListenOptions, cmd cluster.Cmd) (cluster.Process, error) {
	return c.start(ctx, agent.NetListenCommand(c.Path, o), cmd)
}

// NetSend runs `drover agent net-send`, the sending end, to its end.
func (c Client) NetSend(ctx context.Context, o agent.NetSendOptions, cmd cluster.Cmd) error {
	cmd.Args = agent.NetSendCommand(c.Path, o)
	return RunToEnd(ctx, c.T, cmd)
}

// SFTP starts the agent's SFTP server (`drover agent sftp`, at low I/O
// priority) and opens a file system over it.
func (c Client) SFTP(ctx context.Context) (*cluster.CommandFS, error) {
	return cluster.OpenCommandFS(ctx, c.T, agent.SFTPCommand(c.Path))
}

// StartRecv starts the receiving end of a direct checkpoint copy; with
// StartSend, Client is a checkpoint peer.
func (c Client) StartRecv(ctx context.Context, o checkpoint.PeerRecv, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	return c.start(ctx, agent.RecvCommand(c.Path, o), cluster.Cmd{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// StartSend starts the sending end of a direct checkpoint copy.
func (c Client) StartSend(ctx context.Context, o checkpoint.PeerSend, stdin io.Reader, stdout, stderr io.Writer) (cluster.Process, error) {
	return c.start(ctx, agent.SendCommand(c.Path, o), cluster.Cmd{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// Health reads the GPU health of the host (`drover agent health --json`),
// which reads NVML or, where NVML cannot be loaded, nvidia-smi, and the
// kernel log's Xids. xidWait > 0 makes the agent listen that long for
// NVML's Xid events. An error means the agent could not answer; a host
// without GPUs answers with no devices.
func (c Client) Health(ctx context.Context, xidWait time.Duration) (gpu.HostReport, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout+xidWait)
	defer cancel()
	out, err := output(ctx, c.T, agent.HealthCommand(c.Path, xidWait)...)
	if err != nil {
		return gpu.HostReport{}, fmt.Errorf("read GPU health on %s: %w", c.T.Host().Name, err)
	}
	var rep gpu.HostReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("read GPU health on %s: parse %s agent health --json: %w", c.T.Host().Name, c.Path, err)
	}
	rep.Host = c.T.Host().Name
	return rep, nil
}

// Probe reads the host's GPUs through NVML (`drover agent probe --json`);
// see the package's Probe for the fallback to nvidia-smi.
func (c Client) Probe(ctx context.Context) (gpu.HostReport, error) {
	out, err := output(ctx, c.T, agent.ProbeCommand(c.Path)...)
	if err != nil {
		return gpu.HostReport{}, err
	}
	var rep gpu.HostReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("parse %s agent probe --json: %w", c.Path, err)
	}
	if rep.Devices == nil {
		rep.Devices = []gpu.Device{}
	}
	// The agent knows its hostname, not the inventory's name for it.
	rep.Host = c.T.Host().Name
	return rep, nil
}

// GPULease starts `drover agent gpu-lease` for o: it takes the GPUs
// (waiting with o.Queue), says so on cmd.Stdout (gpulease.ReadEvents)
// and holds them until cmd.Stdin ends.
func (c Client) GPULease(ctx context.Context, o gpulease.HoldOptions, cmd cluster.Cmd) (cluster.Process, error) {
	return c.start(ctx, agent.GPULeaseCommand(c.Path, o), cmd)
}

// GPULeases reads the host's GPU leases and queue (`drover agent
// gpu-lease --list`), bounded.
func (c Client) GPULeases(ctx context.Context, dir string) (agent.GPULeaseList, error) {
	var l agent.GPULeaseList
	out, said, err := Read(ctx, c.T, agent.GPULeaseListCommand(c.Path, dir), "drover agent gpu-lease --list", hostReportLimit)
	if err != nil {
		return l, fmt.Errorf("read the GPU leases of %s: %w: %s", c.T.Host().Name, err, said)
	}
	err = json.Unmarshal(out, &l)
	return l, err
}

// stacksLimit bounds `drover agent stacks`'s answer: every process's
// stacks of a host.
const stacksLimit = 64 << 20

// Stacks runs `drover agent stacks` and reads its answer (bounded).
func (c Client) Stacks(ctx context.Context, o agent.StacksOptions) (*agent.StacksReport, error) {
	out, said, err := Read(ctx, c.T, agent.StacksCommand(c.Path, o), "drover agent stacks", stacksLimit)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, said)
	}
	var rep agent.StacksReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("read drover agent stacks' answer: %w", err)
	}
	return &rep, nil
}
