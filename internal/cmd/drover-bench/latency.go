package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/droverhq/drover/internal/fleettest/netdelay"
)

// smallTree is the latency section's code directory: a small project, so
// that the section measures waiting for replies, not bytes.
var smallTree = treeSpec{Seed: 20240602, Small: 200, SmallMin: 512, SmallMax: 8000, Packages: 10}

// delayedFleet is a fleet reached through one netdelay proxy per host:
// drover's inventory and OpenSSH's ssh_config point at the proxies, and
// known_hosts names each host by its proxy's address and port.
type delayedFleet struct {
	*benchFleet
	RTT       time.Duration
	Proxies   []*netdelay.Proxy
	Inventory string
	SSHConfig string
	// Aliases are the ssh_config Host names of the hosts, in order.
	Aliases []string
}

// delay puts a proxy adding rtt/2 each way in front of every host of f.
func delay(f *benchFleet, rtt time.Duration) (*delayedFleet, error) {
	d := &delayedFleet{benchFleet: f, RTT: rtt}
	keys, err := hostKeys(f.KnownHosts)
	if err != nil {
		return nil, err
	}
	var inv, kh, sc strings.Builder
	fmt.Fprintf(&inv, "# written by drover-bench: fleet %s behind delay proxies (%s RTT)\n[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n",
		f.Dir, rtt, f.User, f.KeyFile, filepath.Join(f.Dir, "delayed_known_hosts"))
	sc.WriteString(sshConfig(f.User, f.KeyFile, filepath.Join(f.Dir, "delayed_known_hosts")))
	for i, h := range f.Hosts {
		p, err := netdelay.Listen("127.0.0.1:0", net.JoinHostPort(h.Addr, "22"), rtt/2)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.Proxies = append(d.Proxies, p)
		port := p.Addr().Port
		key, ok := keys[h.Addr]
		if !ok {
			d.Close()
			return nil, fmt.Errorf("no host key for %s in %s", h.Addr, f.KnownHosts)
		}
		fmt.Fprintf(&kh, "[127.0.0.1]:%d %s\n", port, key)
		fmt.Fprintf(&inv, "\n[[host]]\nname = %q\naddress = \"127.0.0.1\"\nport = %d\ngpus = []\n", h.Name, port)
		alias := fmt.Sprintf("d%d", i)
		d.Aliases = append(d.Aliases, alias)
		// Host blocks must come before the catch-all Host * of sshConfig;
		// ssh takes the first value it finds, so prepend.
		sc2 := fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n", alias, port)
		s := sc.String()
		sc.Reset()
		sc.WriteString(sc2 + s)
	}
	d.Inventory = filepath.Join(f.Dir, "delayed.toml")
	d.SSHConfig = filepath.Join(f.Dir, "delayed_ssh_config")
	for path, text := range map[string]string{d.Inventory: inv.String(), d.SSHConfig: sc.String(),
		filepath.Join(f.Dir, "delayed_known_hosts"): kh.String()} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			d.Close()
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return d, nil
}

// hostKeys reads "ADDR TYPE KEY" lines: the first key of each address.
func hostKeys(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read host keys: %w", err)
	}
	keys := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 {
			if _, ok := keys[f[0]]; !ok {
				keys[f[0]] = f[1] + " " + f[2]
			}
		}
	}
	return keys, nil
}

// Close stops the proxies and removes the files delay wrote.
func (d *delayedFleet) Close() {
	for _, p := range d.Proxies {
		p.Close()
	}
	for _, p := range []string{d.Inventory, d.SSHConfig, filepath.Join(d.Dir, "delayed_known_hosts")} {
		if p != "" {
			os.Remove(p)
		}
	}
}

// waits is the proxies' count of round trips waited for so far, over
// every host (netdelay.Stats.Waits).
func (d *delayedFleet) waits() int64 {
	var n int64
	for _, p := range d.Proxies {
		n += p.Stats().Waits
	}
	return n
}

// rtRun is one operation of the latency section, measured in round trips.
type rtRun struct {
	Times []time.Duration
	// Exchanges is the round trips the proxies saw the client wait for
	// in a run, divided by the hosts the operation reached: counted
	// rather than timed, so a busy machine changes it little.
	Exchanges []float64
	Err       error
}

// measureRT runs fn reps times (after before, when set) and records its
// wall time and the proxies' count of exchanges per host.
func (d *delayedFleet) measureRT(ctx context.Context, reps, hosts int, before func(rep int) error, fn func(context.Context) (procStats, error)) rtRun {
	var r rtRun
	for rep := 0; rep < reps && ctx.Err() == nil; rep++ {
		if before != nil {
			if err := before(rep); err != nil {
				r.Err = err
				return r
			}
		}
		d.settle(ctx)
		w0 := d.waits()
		st, err := fn(ctx)
		if err != nil {
			r.Err = err
			return r
		}
		r.Times = append(r.Times, st.Wall)
		r.Exchanges = append(r.Exchanges, float64(d.waits()-w0)/float64(hosts))
	}
	if len(r.Times) == 0 && r.Err == nil {
		r.Err = fmt.Errorf("out of time")
	}
	return r
}

// inRTT is the median time of r in round trips.
func (r rtRun) inRTT(rtt time.Duration) Measure {
	if r.Err != nil {
		return na("%s", reason(r.Err))
	}
	m := medianOf(r.Times)
	m.Value /= rtt.Seconds()
	m.Unit = RTT
	return m
}

// exchanges is the median count of exchanges per host.
func (r rtRun) exchanges() Measure {
	if r.Err != nil || len(r.Exchanges) == 0 {
		return na("%s", reason(r.Err))
	}
	ds := make([]time.Duration, len(r.Exchanges))
	for i, e := range r.Exchanges {
		ds[i] = time.Duration(e * float64(time.Second))
	}
	m := medianOf(ds)
	m.Unit = Count
	return m
}

// latencyRuns is how often each operation of the latency section runs:
// at 50 ms per round trip the figures are far above the noise of one run.
const latencyRuns = 3

// freshRuns are the first run's start on fresh hosts (from res, the run
// with kills) and latencyRuns-1 more, each on hosts without ~/.drover or
// workdir, stopped once every process runs: one run's time varies by a
// few round trips from one to the next on a shared machine. The second
// result is each run's round trips counted per host, as durations of
// that many seconds (for medianOf).
func (b *bench) freshRuns(ctx context.Context, f *benchFleet, d *delayedFleet, res failureResult) (firsts, waits []time.Duration) {
	add := func(r failureResult) {
		if r.Err == nil && r.FirstRunning > 0 {
			firsts = append(firsts, r.FirstRunning)
			waits = append(waits, time.Duration(float64(r.FirstWaits)/float64(f.N)*float64(time.Second)))
		}
	}
	add(res)
	for range latencyRuns - 1 {
		if err := errors.Join(f.removeEverywhere(".drover"), f.removeEverywhere(runWorkdir)); err != nil {
			b.note("latency %s: fresh run: %s", b.rtt, reason(err))
			return firsts, waits
		}
		r := b.measureFailure(ctx, f, runSetup{Inventory: d.Inventory, Tag: "latency-fresh", Waits: d.waits})
		if r.Err != nil {
			b.note("latency %s: fresh run: %s", b.rtt, reason(r.Err))
		}
		add(r)
	}
	return firsts, waits
}

// latencyKills is the outside SIGKILLs of the latency section's run.
const latencyKills = 3

// latency measures drover's operations at a round-trip time of b.rtt, in
// round trips (wall time / RTT) and as exchanges counted by the proxies,
// beside `ssh HOST true` and rsync measured the same way.
func (b *bench) latency(ctx context.Context, f *benchFleet) []Row {
	row := func(what string, m Measure, base string, bm Measure, t Target) Row {
		return Row{Section: fmt.Sprintf("latency %s", b.rtt), N: f.N, What: what, Drover: m, Baseline: base, BaselineTime: bm, Target: t}
	}
	d, err := delay(f, b.rtt)
	if err != nil {
		m := na("%s", reason(err))
		return []Row{row("every operation", m, "", Measure{}, Target{})}
	}
	defer d.Close()
	tree := filepath.Join(b.work, "small-tree")
	job := filepath.Join(b.work, "latency.toml")
	if _, err := generateTree(tree, smallTree); err != nil {
		return []Row{row("every operation", na("%s", reason(err)), "", Measure{}, Target{})}
	}
	if err := writeJob(job, d.Inventory, tree, latencyPushDir, []string{"true"}, 0, 2); err != nil {
		return []Row{row("every operation", na("%s", reason(err)), "", Measure{}, Target{})}
	}
	n, reps := f.N, latencyRuns
	droverCmd := func(args ...string) func(context.Context) (procStats, error) {
		return func(ctx context.Context) (procStats, error) {
			return command{Args: append([]string{b.drover}, args...), Timeout: pushTimeout}.run(ctx)
		}
	}
	b.progress("latency %s, %d hosts: ssh HOST true, drover exec, %d runs each", b.rtt, n, reps)
	sshTrue := d.measureRT(ctx, reps, 1, nil, func(ctx context.Context) (procStats, error) {
		return command{Args: []string{"ssh", "-F", d.SSHConfig, d.Aliases[0], "true"}, Timeout: fanoutTimeout}.run(ctx)
	})
	exec := d.measureRT(ctx, reps, n, nil, droverCmd("exec", d.Inventory, "--", "true"))

	b.progress("latency %s, %d hosts: push (nothing changed, one file) and rsync x %d", b.rtt, n, n)
	rsync := func(ctx context.Context) (procStats, error) { return d.rsyncAll(ctx, tree, latencyRsyncDir) }
	// Untimed first pushes, so that the timed ones find everything there.
	_, errD := droverCmd("push", job)(ctx)
	_, errR := rsync(ctx)
	pushSame, rsyncSame := rtRun{Err: errD}, rtRun{Err: errR}
	if errD == nil {
		pushSame = d.measureRT(ctx, reps, n, nil, droverCmd("push", job))
	}
	if errR == nil {
		rsyncSame = d.measureRT(ctx, reps, n, nil, rsync)
	}
	change := func(rep int) error { return changeOne(tree, smallTree, rep) }
	pushOne := d.measureRT(ctx, reps, n, change, droverCmd("push", job))
	rsyncOne := d.measureRT(ctx, reps, n, change, rsync)

	b.progress("latency %s, %d hosts: drover probe on fresh hosts and with the agent there", b.rtt, n)
	fresh := d.measureRT(ctx, reps, n, func(int) error { return f.removeEverywhere(".drover") }, droverCmd("probe", job))
	present := d.measureRT(ctx, reps, n, nil, droverCmd("probe", job))
	install := na("needs both probes")
	if fm, pm := fresh.inRTT(b.rtt), present.inRTT(b.rtt); fm.OK() && pm.OK() {
		install = Measure{Value: fm.Value - pm.Value, Unit: RTT, N: min(fm.N, pm.N)}
	}

	var res failureResult
	runTarget := Target{Max: 30, Unit: RTT}
	restartTarget := Target{Max: 15, Unit: RTT}
	if err := errors.Join(f.removeEverywhere(".drover"), f.removeEverywhere(runWorkdir)); err != nil {
		res.Err = err
	} else {
		res = b.measureFailure(ctx, f, runSetup{Inventory: d.Inventory, Kills: latencyKills, Tag: "latency-run", Waits: d.waits})
	}
	if res.Err != nil {
		b.note("latency %s: drover run: %s", b.rtt, reason(res.Err))
	}
	firsts, firstWaitsPer := b.freshRuns(ctx, f, d, res)
	firstRun, restart := na("%s", reason(res.Err)), na("%s", reason(res.Err))
	var detect, stopped Measure
	if len(firsts) > 0 {
		firstRun = medianOf(firsts)
		firstRun.Value /= b.rtt.Seconds()
		firstRun.Unit = RTT
	}
	inRTT := func(ds []time.Duration) Measure {
		if len(ds) == 0 {
			return na("%s", reasonOr(res.Err, "no runs"))
		}
		m := medianOf(ds)
		m.Value /= b.rtt.Seconds()
		m.Unit = RTT
		return m
	}
	restart = inRTT(res.Restart)
	detect, stopped = inRTT(res.Detect), inRTT(res.Stop)
	firstWaits, restartWaits := na("%s", reason(res.Err)), na("%s", reason(res.Err))
	if len(firstWaitsPer) > 0 {
		firstWaits = medianOf(firstWaitsPer)
		firstWaits.Unit = Count
	}
	if len(res.RestartWaits) > 0 {
		ds := make([]time.Duration, len(res.RestartWaits))
		for i, w := range res.RestartWaits {
			ds[i] = time.Duration(float64(w) / float64(n) * float64(time.Second))
		}
		restartWaits = medianOf(ds)
		restartWaits.Unit = Count
	}
	base := "ssh HOST true"
	rt := func(r rtRun) Measure { return r.inRTT(b.rtt) }
	return []Row{
		row("`true` on every host (drover exec)", rt(exec), base, rt(sshTrue), Target{MinSpeedup: 1}),
		row("round trips counted per host: drover exec", exec.exchanges(), base, sshTrue.exchanges(), Target{}),
		row("push, nothing changed", rt(pushSame), base, rt(sshTrue), Target{MinSpeedup: 0.5}),
		row("push, nothing changed", rt(pushSame), "rsync x N", rt(rsyncSame), Target{}),
		row("round trips counted per host: push, nothing changed", pushSame.exchanges(), "rsync x N", rsyncSame.exchanges(), Target{}),
		row("push, one file changed", rt(pushOne), "rsync x N", rt(rsyncOne), Target{}),
		row("round trips counted per host: push, one file changed", pushOne.exchanges(), "rsync x N", rsyncOne.exchanges(), Target{}),
		row("agent install on a fresh host (probe fresh - probe again)", install, "", Measure{}, Target{}),
		row("drover probe, fresh hosts", rt(fresh), "", Measure{}, Target{}),
		row("round trips counted per host: drover probe, fresh hosts", fresh.exchanges(), "", Measure{}, Target{}),
		row("drover run, fresh hosts: start -> all processes running", firstRun, "", Measure{}, runTarget),
		row("round trips counted per host: drover run, fresh hosts", firstWaits, "", Measure{}, Target{}),
		row("SIGKILL one worker -> drover reports it", detect, "", Measure{}, Target{}),
		row("SIGKILL one worker -> every other process stopped", stopped, "", Measure{}, Target{}),
		row("SIGKILL one worker -> next attempt all running", restart, "", Measure{}, restartTarget),
		row("round trips counted per host: restart", restartWaits, "", Measure{}, Target{}),
	}
}

// Remote directories of the latency section's pushes.
const (
	latencyPushDir  = "bench-lat-push"
	latencyRsyncDir = "bench-lat-rsync"
)

// rsyncAll is benchFleet.rsyncAll through the proxies.
func (d *delayedFleet) rsyncAll(ctx context.Context, src, dest string) (procStats, error) {
	start := time.Now()
	errs := make(chan error, len(d.Aliases))
	for _, a := range d.Aliases {
		go func() {
			_, err := command{Args: []string{"rsync", "-a", "--delete", "-e", "ssh -F " + d.SSHConfig,
				src + "/", a + ":" + dest + "/"}, Timeout: pushTimeout}.run(ctx)
			if err != nil {
				err = fmt.Errorf("rsync to %s: %w", a, err)
			}
			errs <- err
		}()
	}
	var first error
	for range d.Aliases {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return procStats{Wall: time.Since(start)}, first
}
