package remote

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
)

// stepTimeout bounds each command of a probe. NVML and nvidia-smi hang on a
// wedged GPU; a probe that hangs would hang every command that plans. It
// does not bound installing the agent, whose time depends on the link.
const stepTimeout = time.Minute

// Probe reports the GPUs of the host behind t. It installs the agent
// (agents.Self == "" skips it) and runs `agent probe --json`, which reads
// NVML on the host; when the agent cannot run it parses nvidia-smi; when
// neither works the report has zero devices and a Reason naming what
// failed. It never returns an error because a host without GPUs is a
// normal fleet member: callers decide, in gpu.Select, whether zero GPUs is
// a problem.
func Probe(ctx context.Context, t cluster.Transport, agents Agents) gpu.HostReport {
	if agents.Self == "" {
		return probe(ctx, t, "", nil)
	}
	remote, err := Install(ctx, t, agents)
	return probe(ctx, t, remote, err)
}

// ProbeInstalled is Probe on a host where Install already put the agent,
// at remotePath: a run installs agents before it probes.
func ProbeInstalled(ctx context.Context, t cluster.Transport, remotePath string) gpu.HostReport {
	return probe(ctx, t, remotePath, nil)
}

// probe asks the agent at remote (none when remote is "" and installErr
// nil), then nvidia-smi.
func probe(ctx context.Context, t cluster.Transport, remote string, installErr error) gpu.HostReport {
	name := t.Host().Name
	var why []string
	var agentRep *gpu.HostReport
	if remote != "" || installErr != nil {
		var r gpu.HostReport
		err := installErr // says "install drover agent on <host>"
		if err == nil {
			r, err = Client{T: t, Path: remote}.Probe(ctx)
		}
		if err == nil && r.Source == gpu.SourceNVML {
			return r
		}
		if err != nil {
			why = append(why, "agent: "+err.Error())
		} else {
			// The agent ran but NVML gave nothing; nvidia-smi uses
			// the same library, but a broken install may differ.
			agentRep = &r
			why = append(why, "agent: "+r.Reason)
		}
	}
	rep, err := probeSMI(ctx, t)
	if err == nil {
		if rep.Reason != "" {
			why = append(why, rep.Reason)
		}
		rep.Reason = strings.Join(why, "; ")
		return rep
	}
	if agentRep != nil {
		// NVML's own reason ("libnvidia-ml.so.1 not found") says more
		// than nvidia-smi's absence.
		agentRep.Host = name
		return *agentRep
	}
	why = append(why, "nvidia-smi: "+err.Error())
	return gpu.HostReport{Host: name, Source: gpu.SourceNone, Devices: []gpu.Device{}, Reason: strings.Join(why, "; ")}
}

// ProbeAll probes every transport in parallel; reports are in the order of
// ts.
func ProbeAll(ctx context.Context, ts []cluster.Transport, agents Agents) []gpu.HostReport {
	reps := make([]gpu.HostReport, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i] = Probe(ctx, t, agents)
		}()
	}
	wg.Wait()
	return reps
}

// probeSMI runs the nvidia-smi queries; only the GPU query must succeed.
func probeSMI(ctx context.Context, t cluster.Transport) (gpu.HostReport, error) {
	var o gpu.SMIOutputs
	var err error
	q := gpu.SMIQueries
	if o.GPUs, err = output(ctx, t, q.GPUs...); err != nil {
		return gpu.HostReport{}, err
	}
	o.Apps, _ = output(ctx, t, q.Apps...)
	o.MIG, _ = output(ctx, t, q.MIG...)
	o.Banner, _ = output(ctx, t, q.Banner...)
	return gpu.ReportFromSMI(t.Host().Name, o)
}

// output runs args on the host and returns stdout. Its error says what the
// command printed, briefly: nvidia-smi writes its failures to stdout, a
// loader that cannot run a binary to stderr.
func output(ctx context.Context, t cluster.Transport, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	// Bounded: what a probe prints (a JSON report, nvidia-smi's CSV) is
	// a few KiB a GPU; a host printing without end is stopped there.
	stdout, stderr := cluster.NewHeadBuffer(probeOutput, cancel), cluster.NewHeadBuffer(cluster.QuoteLimit, nil)
	p, err := t.Start(ctx, cluster.Cmd{Args: args, Stdout: stdout, Stderr: stderr})
	if errors.Is(err, exec.ErrNotFound) {
		return nil, errors.New("not found")
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	// Over SSH, cancelling closes the channel but Wait can still block
	// until the remote command exits, and a hung nvidia-smi may never
	// exit: give up on it at the deadline. The buffers are not read again
	// after that, so the late writer races with nobody.
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		if over := stdout.Overflow(t.Host().Name, args[0]); over != nil {
			return nil, over // the cancel was stdout's: past its bound
		}
		return nil, fmt.Errorf("%s: %w", args[0], ctx.Err())
	}
	if over := stdout.Overflow(t.Host().Name, args[0]); over != nil {
		return nil, over
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", args[0], ctx.Err())
	}
	msg := firstLine(stderr.Bytes())
	var ee *cluster.ExitError
	if errors.As(err, &ee) && ee.Code == 127 {
		if msg != "" {
			return nil, fmt.Errorf("not found (%s)", msg)
		}
		return nil, errors.New("not found")
	}
	if msg == "" {
		msg = firstLine(stdout.Bytes())
	}
	if msg != "" {
		return nil, fmt.Errorf("%w: %s", err, msg)
	}
	return nil, err
}

// probeOutput bounds what is read of a probe command's stdout: nvidia-smi's
// answer for a few dozen GPUs, with room to spare.
const probeOutput = 1 << 20

// firstLine is the first non-empty line of out, trimmed, capped so that a
// chatty failure does not flood a table, and escaped: it is the host's.
func firstLine(out []byte) string {
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return cluster.QuoteHost([]byte(l), 0, 200)
		}
	}
	return ""
}
