package runview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/stacktrace"
)

// StacksOptions say whose stacks `drover stacks` prints.
type StacksOptions struct {
	Rank   int    // only this rank; -1: every process
	Host   string // only this host's; "": every host's
	Native bool   // native frames too, where the host has py-spy
	// Wait bounds each process's dump on its host; 0: the agent's 10 s.
	Wait time.Duration
}

// HostStack is one process's stack and the host it runs on.
type HostStack struct {
	Host string
	agent.StackReport
}

// ErrNoStacks is a job with no live Python process on its hosts.
var ErrNoStacks = errors.New("no live Python process of this job on its reachable hosts: " +
	"drover stacks reads the groups drover's agents run in each host's workdir (foreground and detached runs); is the job running?")

// Stacks takes the Python stack of every live process of the job on its
// hosts (`drover agent stacks` on each, at once), foreground and detached
// runs alike: each agent finds its groups through the workdir's pidfiles.
// Nothing is stopped: py-spy reads a process from outside, drover's hook
// makes it print its stack and go on.
func Stacks(ctx context.Context, o InspectOptions, so StacksOptions) ([]HostStack, []error, error) {
	cfg, views, closeAll, err := inspect(ctx, o, true)
	if err != nil {
		return nil, nil, err
	}
	defer closeAll()
	if so.Host != "" {
		views = onHost(views, so.Host)
		if len(views) == 0 {
			return nil, nil, fmt.Errorf("--host %s: no such host in %s (its hosts: %s)", so.Host, o.JobPath, hostNames(cfg.Hosts))
		}
	}
	var (
		mu     sync.Mutex
		out    []HostStack
		failed []error
		wg     sync.WaitGroup
	)
	for _, v := range views {
		if v.Err != nil {
			failed = append(failed, v.Err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := v.Agent().Stacks(ctx, agent.StacksOptions{Workdir: v.Workdir, Native: so.Native, Wait: so.Wait})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Errorf("stacks on %s: %w", hostio.Label(v.Host), err))
				return
			}
			for _, p := range rep.Processes {
				if so.Rank < 0 || p.Rank == so.Rank {
					out = append(out, HostStack{Host: v.Host.Name, StackReport: p})
				}
			}
		}()
	}
	wg.Wait()
	sort.SliceStable(out, func(i, j int) bool { return stackOrder(out[i]) < stackOrder(out[j]) })
	if len(out) == 0 {
		return nil, failed, errors.Join(append([]error{ErrNoStacks}, failed...)...)
	}
	return out, failed, nil
}

// stackOrder sorts by rank, processes without one after the ranks.
func stackOrder(s HostStack) int {
	if s.Rank < 0 {
		return 1 << 30
	}
	return s.Rank
}

// RenderStacks writes each process's stack under a header naming it, its
// host and the frame the verdict would quote, then the verdict.
func RenderStacks(w io.Writer, stacks []HostStack, failed []error) {
	var ranks []stacktrace.Rank
	for _, s := range stacks {
		label := fmt.Sprintf("%s@%s", s.Name, s.Host)
		who := fmt.Sprintf("rank %d", s.Rank)
		if s.Rank < 0 {
			who = "process"
		}
		if s.Error != "" {
			fmt.Fprintf(w, "=== %s: %s (pid %d): no stack: %s\n\n", who, label, s.Pid, s.Error)
		} else {
			v := stacktrace.Classify(s.Stack)
			where := v.Frame.String()
			if v.Collective != "" {
				where = "waits in " + v.Collective
			}
			fmt.Fprintf(w, "=== %s: %s (pid %d, %s): %s\n%s\n\n", who, label, s.Pid, s.Method, where, s.Stack)
		}
		if s.Rank >= 0 {
			ranks = append(ranks, stacktrace.Rank{Rank: s.Rank, Label: label, Stack: s.Stack, Err: s.Error})
		}
	}
	if len(ranks) > 0 {
		fmt.Fprintf(w, "verdict: %s\n", stacktrace.Summary(ranks))
	}
	for _, err := range failed {
		fmt.Fprintf(w, "warning: %v\n", err)
	}
}

// onHost is the views of the host named name.
func onHost(views []*hostio.View, name string) []*hostio.View {
	for _, v := range views {
		if v.Host.Name == name {
			return []*hostio.View{v}
		}
	}
	return nil
}

// hostNames lists hosts' names for an error.
func hostNames(hosts []config.Host) string {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}
