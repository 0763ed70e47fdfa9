// Package slurmtest gives tests a real Slurm cluster on this machine: munged
// and slurmctld in the root namespace, and one slurmd per host of a test
// fleet (internal/fleettest), each in that host's network namespace under
// the host's name and address. Tests submit and run real jobs against it,
// so the slurm transport, drover submit and the no-orphans promises are
// checked against Slurm itself, not a mock.
//
// A test package brings one cluster up for all its tests:
//
//	var sl *slurmtest.Cluster
//
//	func TestMain(m *testing.M) {
//		os.Exit(slurmtest.Main(m, slurmtest.Options{Name: "sl", N: 3, Subnet: 25}, &sl))
//	}
//
//	func TestX(t *testing.T) {
//		slurmtest.Need(t, sl) // skips under -short or without root/Slurm; fails under CI=true
//		job := sl.Allocate(t, 3)
//		...
//	}
//
// Everything the cluster writes lives in one directory per fleet name and
// testfleet slot (DROVER_TESTFLEET_SLOT), and its ports follow the fleet's
// subnet (unique per package and slot), so packages and checkouts running
// at once never share a cluster.
package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// upTimeout bounds bringing the cluster up after its fleet: slurmd nodes
// register within seconds.
const upTimeout = 90 * time.Second

// Options say which cluster a test package wants.
type Options struct {
	// Name, N and Subnet are the fleet's (fleettest.Options); the nodes
	// are named like the fleet's hosts, "<Name><slot>-h<i>".
	Name   string
	N      int
	Subnet int
	// CPUs is each node's configured CPU count (default 8); Slurm is told
	// to believe it whatever this machine has.
	CPUs int
}

// Cluster is a running Slurm cluster.
type Cluster struct {
	Fleet *fleettest.Fleet
	// Dir holds the configuration, state, spool and logs.
	Dir string
	// Conf is the slurm.conf path; Env sets SLURM_CONF to it.
	Conf string
	// Nodes are the node names, host i of the fleet being Nodes[i].
	Nodes []string
	// Partition is the one partition, holding every node.
	Partition string

	opts    Options
	skip    string
	upErr   error
	once    sync.Once
	started bool
	mu      sync.Mutex
	closed  bool
	// reaperW is the write end of the pipe the crash reaper waits on.
	reaperW *os.File
}

// Available reports why this machine cannot run a test cluster, or nil.
func Available() error {
	if err := fleettest.Available(); err != nil {
		return err
	}
	for _, tool := range []string{"munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue", "scontrol", "sinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("slurmtest needs %s (apt-get install slurm-wlm munge): %w", tool, err)
		}
	}
	return nil
}

// Main brings the cluster up lazily (at the first Need), runs the tests and
// tears it down, returning m.Run's exit code for os.Exit.
func Main(m *testing.M, opts Options, c **Cluster) (code int) {
	cl := &Cluster{opts: opts}
	*c = cl
	if err := Available(); err != nil {
		cl.skip = err.Error()
		return m.Run()
	}
	defer func() {
		if err := cl.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "slurmtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()
	return m.Run()
}

// Need skips t under -short and where no cluster can run, except under
// CI=true where that fails t; a cluster that should have come up but did
// not always fails t.
func Need(t testing.TB, c *Cluster) {
	t.Helper()
	if c == nil {
		t.Fatal("slurmtest: no cluster; call slurmtest.Main from TestMain")
	}
	if testing.Short() {
		t.Skip("slurmtest: Slurm tests do not run under -short")
	}
	if c.skip == "" {
		c.once.Do(func() {
			c.started = true
			if c.upErr = c.up(); c.upErr != nil {
				fmt.Fprintf(os.Stderr, "slurmtest: %v\n", c.upErr)
			}
		})
	}
	switch {
	case c.upErr != nil:
		t.Fatalf("slurmtest: cluster did not come up: %v", c.upErr)
	case c.skip != "":
		testenv.Need(t, "a Slurm test cluster", errors.New(c.skip))
	}
}

// slot is the testfleet slot (0 when unset), which also separates ports.
func slot() int {
	k, err := strconv.Atoi(os.Getenv(fleettest.SlotEnv))
	if err != nil || k < 0 || k > 7 {
		return 0
	}
	return k
}

func (c *Cluster) up() error {
	opts := c.opts
	if opts.CPUs == 0 {
		opts.CPUs = 8
	}
	fleet, err := fleettest.Up(fleettest.Options{Name: opts.Name, N: opts.N, Subnet: opts.Subnet})
	if err != nil {
		return err
	}
	c.Fleet = fleet
	k := slot()
	name := opts.Name
	if k > 0 {
		name += strconv.Itoa(k)
	}
	c.Dir = filepath.Join(os.TempDir(), "drover-slurmtest-"+name)
	stopLeftovers(c.Dir)
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("remove old cluster dir: %w", err)
	}
	for _, h := range fleet.Hosts {
		c.Nodes = append(c.Nodes, h.Name)
		if err := os.MkdirAll(filepath.Join(c.Dir, "spool", h.Name), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"state", "log", "munge"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return err
		}
	}
	c.Partition = "main"
	c.Conf = filepath.Join(c.Dir, "slurm.conf")
	ctldAddr := fleet.Hosts[0].Addr[:strings.LastIndexByte(fleet.Hosts[0].Addr, '.')] + ".1"
	// Ports follow the fleet's subnet, unique per package and slot, so
	// that packages (and checkouts) running at once never share a
	// slurmctld port.
	subnet, _ := strconv.Atoi(strings.Split(fleet.Hosts[0].Addr, ".")[2])
	if err := c.writeConfig(name, ctldAddr, 6000+2*subnet, opts.CPUs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	if err := c.startReaper(); err != nil {
		return err
	}
	if err := c.startDaemons(ctx); err != nil {
		return err
	}
	return c.waitIdle(ctx)
}

func (c *Cluster) writeConfig(name, ctldAddr string, port, cpus int) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	host, _, _ = strings.Cut(host, ".")
	d := c.Dir
	var b strings.Builder
	fmt.Fprintf(&b, `ClusterName=%s
SlurmctldHost=%s(%s)
SlurmctldPort=%d
SlurmdPort=%d
AuthType=auth/munge
AuthInfo=socket=%s/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool/%%n
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/spool/%%n/slurmd.pid
SlurmctldLogFile=%s/log/slurmctld.log
SlurmdLogFile=%s/log/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=30
JobRequeue=1
`, name, host, ctldAddr, port, port+1, d, d, d, d, d, d, d)
	for _, h := range c.Fleet.Hosts {
		fmt.Fprintf(&b, "NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN\n", h.Name, h.Addr, cpus)
	}
	fmt.Fprintf(&b, "PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n", c.Partition)
	if err := os.WriteFile(c.Conf, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, "cgroup.conf"), []byte(cgroupConf()), 0o644)
}

// cgroupConf names the cgroup plugin slurmd must load even though
// proctrack/linuxproc and task/none use no cgroup: Slurm's autodetection
// fails on a hybrid v1/v2 hierarchy (systemd's tmpfs at /sys/fs/cgroup),
// and v2 without systemd needs IgnoreSystemd.
func cgroupConf() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"
	}
	return "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n"
}

func (c *Cluster) startDaemons(ctx context.Context) error {
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	m := filepath.Join(c.Dir, "munge")
	if err := os.WriteFile(filepath.Join(m, "key"), key, 0o400); err != nil {
		return err
	}
	if err := c.cmd(ctx, "munged", "--force", "--socket="+m+"/sock", "--key-file="+m+"/key",
		"--pid-file="+m+"/pid", "--seed-file="+m+"/seed", "--log-file="+m+"/log"); err != nil {
		return err
	}
	// Daemonized (no -D): each outlives the command that starts it and is
	// stopped by Close, or by the fleet's teardown for the slurmds.
	if err := c.cmd(ctx, "slurmctld", "-c", "-i"); err != nil {
		return err
	}
	for i, h := range c.Fleet.Hosts {
		if _, err := c.Fleet.Exec(i, "env", "SLURM_CONF="+c.Conf, "slurmd", "-N", h.Name); err != nil {
			return fmt.Errorf("start slurmd on %s: %w", h.Name, err)
		}
	}
	return nil
}

// cmd runs a Slurm or munge command against this cluster.
func (c *Cluster) cmd(ctx context.Context, args ...string) error {
	_, err := c.Output(ctx, args...)
	return err
}

// Output runs a Slurm command (sbatch, squeue, scancel, ...) against this
// cluster and returns its stdout; stderr is part of the error.
func (c *Cluster) Output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), c.Env()...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Env is what a command needs to talk to this cluster.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

func (c *Cluster) waitIdle(ctx context.Context) error {
	for {
		out, err := c.Output(ctx, "sinfo", "--noheader", "--format=%T", "--partition="+c.Partition)
		if err == nil && strings.TrimSpace(out) == "idle" {
			return nil
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(c.Dir, "log", "slurmctld.log"))
			return fmt.Errorf("nodes not idle within %v (sinfo: %q, %v); slurmctld.log:\n%s", upTimeout, out, err, tail(log, 2000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// stopLeftovers stops the slurmctld and munged of a crashed earlier run in
// dir (their slurmds went with the fleet's namespaces).
func stopLeftovers(dir string) {
	for _, pidFile := range []string{"slurmctld.pid", "munge/pid"} {
		b, err := os.ReadFile(filepath.Join(dir, pidFile))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// startReaper starts a detached process that stops slurmctld and munged
// when this process dies without Close (panic, timeout, signal): it waits
// for EOF on a pipe only this process writes to, as testfleet's reaper
// does for the fleet (which takes the slurmds with its namespaces).
func (c *Cluster) startReaper() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start reaper: %w", err)
	}
	defer r.Close()
	script := `cat >/dev/null; for f in "$1/slurmctld.pid" "$1/munge/pid"; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; exit 0`
	cmd := exec.Command("sh", "-c", script, "sh", c.Dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start reaper: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	c.reaperW = w
	return nil
}

// Close stops the daemons, tears the fleet (and its slurmds) down and
// removes the cluster's directory.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.started {
		return nil
	}
	c.closed = true
	var errs []error
	if c.Fleet != nil {
		errs = append(errs, c.Fleet.Close())
	}
	if c.Dir != "" {
		stopLeftovers(c.Dir)
		// Best effort: a daemon killed a moment ago may still be writing
		// there, and the next run of this package removes it anyway.
		_ = os.RemoveAll(c.Dir)
	}
	if c.reaperW != nil {
		c.reaperW.Close() // the reaper finds nothing left to stop
	}
	return errors.Join(errs...)
}

// Allocate submits a job holding n nodes (a batch script that sleeps), waits
// until it runs and returns its id; the job is cancelled when t ends. It is
// the allocation a test runs steps in, as drover does inside sbatch.
func (c *Cluster) Allocate(t testing.TB, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := c.Output(ctx, "sbatch", "--parsable", "--nodes="+strconv.Itoa(n), "--job-name=slurmtest",
		"--output=/dev/null", "--wrap=sleep 3600")
	if err != nil {
		t.Fatalf("slurmtest: allocate %d nodes: %v", n, err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	t.Cleanup(func() { _, _ = c.Output(context.Background(), "scancel", id) })
	if err := c.WaitState(ctx, id, "RUNNING"); err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	return id
}

// WaitState waits until job id is in state (squeue's %T: RUNNING,
// PENDING...); "" waits until squeue no longer lists it.
func (c *Cluster) WaitState(ctx context.Context, id, state string) error {
	for {
		out, err := c.Output(ctx, "squeue", "--noheader", "--jobs="+id, "--format=%T")
		got := strings.TrimSpace(out)
		if err == nil && got == state {
			return nil
		}
		if state == "" && ((err == nil && got == "") || strings.Contains(fmt.Sprint(err), "Invalid job id")) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s not %q (squeue: %q, %v)", id, state, got, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
