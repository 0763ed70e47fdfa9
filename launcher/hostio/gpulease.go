package hostio

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/gpulease"
)

// GPUHold is a host's `drover agent gpu-lease` session: the GPUs it
// holds for an attempt, until Release.
type GPUHold struct {
	Host string
	GPUs []int
	// Files are the lease files on the host, which the group's agents
	// hold too (agent.RunOptions.GPULeases).
	Files []string
	in    *io.PipeWriter
	proc  cluster.Process
	once  sync.Once
}

// Release ends the session: the agent gives the GPUs back (its stdin
// ended) and exits; a session whose connection is gone ended already.
func (h *GPUHold) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.in.Close()
		done := make(chan struct{})
		go func() { h.proc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second): // a lost connection: the agent sees its end
		}
	})
}

// LeaseCandidates are the GPUs indices (in order) as gpu-lease takes
// them: each with its key, the UUID rep reports for it (else gpuN).
func LeaseCandidates(indices []int, rep gpu.HostReport) []gpulease.Candidate {
	uuid := map[int]string{}
	for _, d := range rep.Devices {
		uuid[d.Index] = d.UUID
	}
	out := make([]gpulease.Candidate, 0, len(indices))
	for _, i := range indices {
		key := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
				return r
			}
			return '_'
		}, uuid[i])
		if key == "" || len(key) > 96 {
			key = fmt.Sprintf("gpu%d", i)
		}
		out = append(out, gpulease.Candidate{Index: i, Key: key})
	}
	return out
}

// HoldGPUs starts gpu-lease on c's host for o and waits until it holds
// the GPUs (each "waiting" event to onWait), it finds them leased (a
// *gpulease.BusyError naming the holders), or ctx ends. The session is
// returned whenever it started, so that the caller releases it.
func HoldGPUs(ctx context.Context, c remote.Client, o gpulease.HoldOptions, onWait func(gpulease.Event)) (*GPUHold, error) {
	host := c.T.Host().Name
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := cluster.NewHeadBuffer(cluster.QuoteLimit, nil)
	p, err := c.GPULease(context.WithoutCancel(ctx), o, cluster.Cmd{Stdin: inR, Stdout: outW, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("lease GPUs on %s: %w", host, err)
	}
	h := &GPUHold{Host: host, in: inW, proc: p}
	go func() { p.Wait(); outW.Close() }()
	result := make(chan error, 1)
	go func() {
		var final error = fmt.Errorf("lease GPUs on %s: the agent ended without an answer", host)
		gpulease.ReadEvents(outR, func(ev gpulease.Event) bool {
			switch ev.State {
			case "waiting":
				onWait(ev)
				return true
			case "held":
				h.GPUs, h.Files, final = ev.GPUs, ev.Files, nil
			case "busy":
				final = &gpulease.BusyError{Host: host, Want: max(o.Min, o.N, 1), Holders: ev.Holders}
			default:
				final = fmt.Errorf("lease GPUs on %s: %s", host, ev.Error)
			}
			return false
		})
		result <- final
		io.Copy(io.Discard, outR)
	}()
	select {
	case err := <-result:
		if err != nil && len(stderr.Bytes()) > 0 {
			err = fmt.Errorf("%w (%s)", err, stderr.Quote(cluster.QuoteLimit))
		}
		return h, err
	case <-ctx.Done():
		return h, ctx.Err()
	}
}

// GPUsOrNil is the GPUs h holds (none for a nil session).
func (h *GPUHold) GPUsOrNil() []int {
	if h == nil {
		return nil
	}
	return h.GPUs
}
