package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuGroup is a cgroup holding every host's sshd listener, and so every
// process a connection makes (sessions, shells, tar, rsync's server): the
// kernel adds their CPU to the group whoever reaps them, where a parent's
// cutime misses a child that outlived it or was never waited for.
type cpuGroup struct {
	dir string
	v2  bool // cgroup v2: cpu.stat's usage_usec; v1: cpuacct.usage (ns)
}

// newCPUGroup makes the group name under the cpu accounting hierarchy and
// moves pids into it; nil and an error when this machine has none.
func newCPUGroup(name string, pids []int) (*cpuGroup, error) {
	g := &cpuGroup{}
	switch {
	case fileExists("/sys/fs/cgroup/cpuacct/cpuacct.usage"):
		g.dir = filepath.Join("/sys/fs/cgroup/cpuacct", name)
	case fileExists("/sys/fs/cgroup/cgroup.controllers"):
		g.dir, g.v2 = filepath.Join("/sys/fs/cgroup", name), true
	default:
		return nil, errors.New("no cgroup cpu accounting (neither cgroup v1 cpuacct nor v2)")
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("make cgroup %s: %w", g.dir, err)
	}
	for _, pid := range pids {
		if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			g.remove()
			return nil, fmt.Errorf("move sshd %d into %s: %w", pid, g.dir, err)
		}
	}
	return g, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// usage is the CPU time every process of the group has used so far.
func (g *cpuGroup) usage() (time.Duration, error) {
	if !g.v2 {
		data, err := os.ReadFile(filepath.Join(g.dir, "cpuacct.usage"))
		if err != nil {
			return 0, fmt.Errorf("read cgroup cpu usage: %w", err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cgroup cpu usage: %w", err)
		}
		return time.Duration(ns), nil
	}
	data, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return 0, fmt.Errorf("read cgroup cpu usage: %w", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read cgroup cpu usage: %w", err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, errors.New("read cgroup cpu usage: no usage_usec in cpu.stat")
}

// remove deletes the group once its processes are gone (the fleet's
// teardown kills them); a group still in use is left, to be removed by
// the next run of the same name.
func (g *cpuGroup) remove() {
	for i := 0; i < 50; i++ {
		if err := os.Remove(g.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
