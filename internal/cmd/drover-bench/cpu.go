package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// sshdCPU is the CPU time every host's sshd has used so far: each
// listener's own and its reaped children's (one per connection, with the
// sessions and shells they started and waited for). The difference over an
// operation, taken when the fleet has settled, is what the fleet's side of
// it cost.
//
// With a cgroup holding the listeners (cpuGroup) the kernel's count is
// used; without, the listeners' own and reaped children's time, which
// misses a process that outlived its parent (rsync's server looked almost
// free that way).
func (f *benchFleet) sshdCPU() (time.Duration, error) {
	if f.cpu != nil {
		return f.cpu.usage()
	}
	pids, err := f.listenerPids()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for i, pid := range pids {
		ticks, err := treeTicks("/proc", pid)
		if err != nil {
			return 0, fmt.Errorf("sshd of %s: %w", f.Hosts[i].Name, err)
		}
		total += time.Duration(ticks) * time.Second / clockTicks
	}
	return total, nil
}

// listenerPids are the hosts' sshd listeners, in host order.
func (f *benchFleet) listenerPids() ([]int, error) {
	var pids []int
	for _, h := range f.Hosts {
		pidFile := filepath.Join(f.Dir, "hosts", h.Name, "sshd.pid")
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return nil, fmt.Errorf("sshd of %s: %w", h.Name, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("sshd of %s: bad pid file %s", h.Name, pidFile)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// treeTicks is a process's user+sys time plus that of its waited-for
// children (fields 14-17 of /proc/PID/stat), in clock ticks.
func treeTicks(proc string, pid int) (uint64, error) {
	stat, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
	}
	var sum uint64
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseUint(f[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
		}
		sum += v
	}
	return sum, nil
}

// cpuRows say what one operation cost in CPU, for drover (outs[0]) and
// the baseline it was compared with (outs[base]): the client's CPU per
// host, the fleet's sshd CPU per connection, and the wall time against the
// floor this machine's cores put under it ((client + sshd CPU) / cores).
// These carry over to real fleets, where every host has its own CPU,
// better than wall times on one machine do.
func cpuRows(section string, n int, what string, outs []outcome, base int, baseName string) []Row {
	cores := float64(runtime.NumCPU())
	perHost := func(o outcome, ds []time.Duration) Measure {
		if o.Err != nil || len(ds) == 0 {
			return na("%s", reasonOr(o.Err, "not measured"))
		}
		m := medianOf(ds)
		return Measure{Value: m.Value * 1000 / float64(n), Unit: Millis, N: m.N}
	}
	floor := func(o outcome) Measure {
		if o.Err != nil || len(o.CPU) == 0 || len(o.ServerCPU) != len(o.Times) {
			return na("%s", reasonOr(o.Err, "not measured"))
		}
		ratios := make([]time.Duration, len(o.Times))
		for i := range o.Times {
			fl := (o.CPU[i] + o.ServerCPU[i]).Seconds() / cores
			if fl <= 0 {
				return na("no CPU time recorded")
			}
			// medianOf takes durations; a ratio r is carried as r seconds.
			ratios[i] = time.Duration(o.Times[i].Seconds() / fl * float64(time.Second))
		}
		m := medianOf(ratios)
		m.Unit = Ratio
		return m
	}
	b := outs[base]
	return []Row{
		{Section: section, N: n, What: what + ": client CPU per host", Drover: perHost(outs[0], outs[0].CPU),
			Baseline: baseName, BaselineTime: perHost(b, b.CPU)},
		{Section: section, N: n, What: what + ": sshd CPU per connection", Drover: perHost(outs[0], outs[0].ServerCPU),
			Baseline: baseName, BaselineTime: perHost(b, b.ServerCPU)},
		{Section: section, N: n, What: fmt.Sprintf("%s: wall time / CPU floor (%d cores)", what, runtime.NumCPU()),
			Drover: floor(outs[0]), Baseline: baseName, BaselineTime: floor(b)},
	}
}

func reasonOr(err error, s string) string {
	if err != nil {
		return reason(err)
	}
	return s
}
