package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procKey names a process for good: pid plus start time, so a recycled
// pid is never mistaken for the process it replaced.
type procKey struct {
	Pid   int
	Start uint64 // clock ticks after boot (/proc/PID/stat field 22)
}

// workerProc is one process of the benchmark's workload, seen from outside.
type workerProc struct {
	Key  procKey
	PPid int
	Host int  // index in the fleet
	Top  bool // started by drover's agent (not a child of another workload process)
	Leaf bool // the long-running process of a worker (sleep)
	// Alive is false for zombies: a process that has died but is not yet
	// reaped is stopped for all purposes here.
	Alive bool
}

// procScanner finds the workload's processes on the fleet's hosts by
// walking /proc of this machine: the hosts are network namespaces here, so
// a process belongs to host i when its network namespace is host i's. It is
// much cheaper than a command per host, so it can poll every few
// milliseconds.
type procScanner struct {
	proc   string         // "/proc"
	netns  map[uint64]int // namespace inode -> host index
	top    string         // cmdline of a worker as the agent starts it
	leaf   string         // cmdline of its long-running child
	hosts  int
	readNS func(pid int) (uint64, error)
}

// newProcScanner maps the fleet's namespaces (/run/netns/NAME) to hosts.
func newProcScanner(f *benchFleet, top, leaf []string) (*procScanner, error) {
	s := &procScanner{proc: "/proc", netns: map[uint64]int{}, top: cmdline(top), leaf: cmdline(leaf), hosts: f.N}
	for i, h := range f.Hosts {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/run/netns", h.NetNS), &st); err != nil {
			return nil, fmt.Errorf("find network namespace of %s: %w", h.Name, err)
		}
		s.netns[st.Ino] = i
	}
	s.readNS = s.procNS
	return s, nil
}

// cmdline is argv as /proc/PID/cmdline holds it.
func cmdline(argv []string) string {
	return strings.Join(argv, "\x00") + "\x00"
}

func (s *procScanner) procNS(pid int) (uint64, error) {
	link, err := os.Readlink(filepath.Join(s.proc, strconv.Itoa(pid), "ns", "net"))
	if err != nil {
		return 0, err
	}
	inner, ok := strings.CutPrefix(link, "net:[")
	if !ok {
		return 0, fmt.Errorf("unexpected namespace link %q", link)
	}
	return strconv.ParseUint(strings.TrimSuffix(inner, "]"), 10, 64)
}

// scan lists the workload processes on the fleet right now. Processes that
// vanish while being read are simply not listed.
func (s *procScanner) scan() ([]workerProc, error) {
	d, err := os.Open(s.proc)
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	var out []workerProc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join(s.proc, name, "cmdline"))
		if err != nil {
			continue
		}
		leaf := string(cl) == s.leaf
		if !leaf && string(cl) != s.top {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(s.proc, name, "stat"))
		if err != nil {
			continue
		}
		state, ppid, start, err := parseStat(stat)
		if err != nil {
			return nil, fmt.Errorf("scan process %d: %w", pid, err)
		}
		ino, err := s.readNS(pid)
		if err != nil {
			continue
		}
		host, ok := s.netns[ino]
		if !ok {
			continue
		}
		out = append(out, workerProc{Key: procKey{pid, start}, PPid: ppid, Host: host, Leaf: leaf,
			Alive: state != 'Z' && state != 'X'})
	}
	pids := map[int]bool{}
	for _, p := range out {
		pids[p.Key.Pid] = true
	}
	for i := range out {
		out[i].Top = !out[i].Leaf && !pids[out[i].PPid]
	}
	return out, nil
}

// parseStat reads state, ppid and start time from /proc/PID/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(stat []byte) (state byte, ppid int, start uint64, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("malformed stat %q", shorten(string(stat), 60))
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, 0, fmt.Errorf("malformed stat %q", shorten(string(stat), 60))
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, 0, fmt.Errorf("malformed stat ppid %q", f[1])
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("malformed stat starttime %q", f[19])
	}
	return f[0][0], ppid, start, nil
}

// cpuTicks is a process's user+sys time in clock ticks (fields 14, 15).
func cpuTicks(proc string, pid int) (uint64, error) {
	stat, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
	}
	return u + s, nil
}

// clockTicks is USER_HZ, which Linux fixes at 100 on every architecture
// Go supports.
const clockTicks = 100

// settleLimit bounds the wait for a quiet fleet; a fleet that is never
// quiet (a stuck session) is measured anyway rather than stalling the run.
const settleLimit = 3 * time.Second

// settle waits until every host runs nothing but its sshd listener: the
// sessions of the tool timed before have exited. sshd's clean-up of a
// closed connection takes CPU on the machine the next tool runs on, and
// the tools take turns, so without this each figure depended on which
// tool went before it.
func (f *benchFleet) settle(ctx context.Context) {
	s, err := newProcScanner(f, nil, nil)
	if err != nil {
		return
	}
	deadline := time.Now().Add(settleLimit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := s.count(); err != nil || n <= f.N {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count is how many processes run in the fleet's network namespaces.
func (s *procScanner) count() (int, error) {
	d, err := os.Open(s.proc)
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if ino, err := s.readNS(pid); err == nil {
			if _, ok := s.netns[ino]; ok {
				n++
			}
		}
	}
	return n, nil
}
