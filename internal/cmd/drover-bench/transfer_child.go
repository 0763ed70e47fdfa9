package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
)

// txHost is one host as the controller's side of the transfer section
// reaches it: over SSH through the slow link.
type txHost struct {
	t    cluster.Transport
	fs   cluster.FS
	home string
}

// transferChild is the controller's side of the transfer section, run by
// the harness in a network namespace behind the slow link: it reads a
// transferSpec on stdin and prints one transferResult per case.
func transferChild(stdin io.Reader, stdout, stderr io.Writer) int {
	var spec transferSpec
	if err := json.NewDecoder(stdin).Decode(&spec); err != nil {
		fmt.Fprintf(stderr, "drover-bench %s: read the spec: %v\n", transferChildArg, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hs := make([]txHost, len(spec.Hosts))
	for i, h := range spec.Hosts {
		t, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
		if err != nil {
			fmt.Fprintf(stderr, "drover-bench %s: %v\n", transferChildArg, err)
			return 1
		}
		defer t.Close()
		fsys, err := t.FS(ctx)
		if err == nil {
			hs[i].home, err = fsys.Home()
		}
		if err != nil {
			fmt.Fprintf(stderr, "drover-bench %s: %s: %v\n", transferChildArg, h.Name, err)
			return 1
		}
		hs[i].t, hs[i].fs = t, fsys
	}
	enc := json.NewEncoder(stdout)
	for i, c := range spec.Cases {
		if _, err := fmt.Fprintln(stdout, transferStart); err != nil {
			return 1
		}
		r := runTransferCase(ctx, hs, spec, i, c, stderr)
		fmt.Fprintf(stderr, "  %s: %.2f s, controller CPU %.0f ms, peak RSS %.1f MiB %s\n", c, r.Seconds, r.CPU*1000, r.MaxRSS, r.Err)
		if err := enc.Encode(r); err != nil || ctx.Err() != nil {
			return 1
		}
		cleanOwn(hs[:min(c.Targets+1, len(hs))], i)
	}
	return 0
}

// runTransferCase measures one case with a fresh record and copy area.
func runTransferCase(ctx context.Context, hs []txHost, spec transferSpec, i int, c transferCase, stderr io.Writer) transferResult {
	res := transferResult{Case: c}
	if c.Targets+1 > len(hs) {
		res.Err = "not enough hosts"
		return res
	}
	hosts := make([]checkpoint.Host, c.Targets+1)
	for k, h := range hs[:c.Targets+1] {
		own := path.Join(h.home, "tx", fmt.Sprintf("own-%d", i))
		hosts[k] = checkpoint.Host{Name: spec.Hosts[k].Name, FS: h.fs, Dir: path.Join(h.home, "tx", "ck-"+c.Entry), Own: own}
		if !c.Relay {
			hosts[k].Addr, hosts[k].Peer = spec.Hosts[k].Address, remote.Client{T: h.t, Path: spec.Agent}
		}
	}
	dir, err := os.MkdirTemp("", "drover-bench-tx")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	rec, err := checkpoint.LoadRecord(filepath.Join(dir, "record.json"), "bench")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	m := checkpoint.New(rec, func(format string, args ...any) { fmt.Fprintf(stderr, "    "+format+"\n", args...) }, nil)
	before := rusage()
	start := time.Now()
	var first float64
	switch c.Kind {
	case "copy":
		err = copyCase(ctx, m, hosts, c)
	case "data":
		first, err = dataCase(ctx, hs, spec, i, c, &res.Again, stderr)
	default:
		_, err = m.Stage(ctx, hosts, checkpoint.Settings{Copies: 1, Keep: 1})
	}
	res.Seconds = time.Since(start).Seconds()
	if c.Kind == "data" {
		res.Seconds = first // the first staging alone
	}
	after := rusage()
	res.CPU = cpuSeconds(after) - cpuSeconds(before)
	// VmHWM, not getrusage's ru_maxrss: that keeps across exec the
	// harness's own peak at the fork (see watchHWM), which after the
	// other sections is larger than this child will ever be.
	if kb, err := vmHWM(os.Getpid()); err == nil {
		res.MaxRSS = float64(kb) / 1024
	}
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// copyCase lets a Watcher copy the checkpoint, as while training runs,
// and waits until every target holds it.
func copyCase(ctx context.Context, m *checkpoint.Manager, hosts []checkpoint.Host, c transferCase) error {
	stop := m.Watch(ctx, hosts, checkpoint.Settings{Copies: c.Targets + 1, Keep: 1, PollEvery: 100 * time.Millisecond})
	defer stop()
	for ctx.Err() == nil {
		for _, e := range m.Record().Entries() {
			if len(e.Held) >= c.Targets+1 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ctx.Err()
}

// cleanOwn removes case i's copies on every host (rm on the host: over
// SFTP, 1,000 files would be 1,000 round trips on the slow link), after
// its result, so that its CPU is not the case's.
func cleanOwn(hs []txHost, i int) {
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			own := path.Join(h.home, "tx", fmt.Sprintf("own-%d", i))
			if p, err := h.t.Start(ctx, cluster.Cmd{Args: []string{"rm", "-rf", own}}); err == nil {
				_ = p.Wait()
			}
		}()
	}
	wg.Wait()
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

func cpuSeconds(ru syscall.Rusage) float64 {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
