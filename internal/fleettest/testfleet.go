// Package fleettest gives tests a fleet of real SSH hosts on this machine:
// each host is an OpenSSH sshd in its own network namespace with its own
// address, host key and private home directory, reached as the unprivileged
// user "drovertest". It wraps scripts/testfleet so that SSH, SFTP, network
// partitions and address changes are tested against the real thing rather
// than mocks.
//
// A test package brings one fleet up for all its tests:
//
//	var fleet *fleettest.Fleet
//
//	func TestMain(m *testing.M) {
//		os.Exit(fleettest.Main(m, fleettest.Options{Name: "cl", N: 8, Subnet: 11}, &fleet))
//	}
//
//	func TestX(t *testing.T) {
//		fleettest.Need(t, fleet) // skips without root; fails under CI=true
//		...
//	}
//
// Subnets (the X of 10.231.X.0/24) are assigned per test package so that
// parallel `go test ./...` runs never collide.
package fleettest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
)

// User is the unprivileged login user on every fleet host.
const User = "drovertest"

// upTimeout bounds bringing a fleet up; a healthy fleet of a dozen hosts
// takes a few seconds, so this only catches a hung sshd or script.
const upTimeout = 3 * time.Minute

// Options say which fleet a test package wants.
type Options struct {
	// Name prefixes host names ("<Name>-h<i>") and namespaces; it also
	// names the fleet's directory, so a fleet left behind by a crashed run
	// is found and removed by the next run of the same package.
	// Lower-case letters, digits and '-', at most 16 characters.
	Name string
	// N is the number of hosts (1..240).
	N int
	// Subnet is X in 10.231.X.0/24; host i gets 10.231.X.(First+i). Each
	// test package has its own so that packages can run in parallel.
	Subnet int
	// First is the last octet of host 0's address; 0 means 10. Fleets of
	// different names may share a subnet (and its bridge) when their
	// address ranges do not overlap.
	First int
	// TmpfsHomes puts the hosts' homes on a tmpfs (up --tmpfs-homes), for
	// benchmarks that create and delete many files: a journal-less ext4,
	// as some VM images have, makes each create scan the inodes deleted in
	// the last minutes, a cost a real host's filesystem does not have.
	TmpfsHomes bool
	// Shell, when set (e.g. "/bin/bash"), is the login user's shell on
	// this fleet's hosts, with /etc/skel's dotfiles in the homes, as on a
	// fresh Ubuntu account (up --shell); "" keeps the account's /bin/sh.
	// The account is shared by every fleet on the machine, so the change
	// is made in the hosts' own view of /etc/passwd only.
	Shell string
}

// Host is one host of the fleet as the test sees it from the outside.
type Host struct {
	// Name is "<Options.Name>-h<i>", as in the generated inventory.
	Name string
	// Addr is the host's current IPv4 address (changed by Fleet.Move).
	Addr string
	// NetNS is the network namespace the host lives in (for `ip netns exec`).
	NetNS string
}

// Fleet is a running test fleet. Its exported fields describe it; they must
// not be modified. Methods are safe for concurrent use, except that Move
// changes Hosts[i].Addr, so tests that Move must not read Hosts concurrently
// (use ClusterHosts, which copies under a lock).
type Fleet struct {
	// Dir holds everything the fleet is made of: keys, known_hosts, the
	// inventory and one directory per host (its home, sshd config and log).
	Dir   string
	Hosts []Host
	// User is the login user on every host (User).
	User string
	// KeyFile is the ed25519 private key (no passphrase) that logs in as
	// User on every host.
	KeyFile string
	// KnownHosts lists every host's address with its own host key, so that
	// clients can verify hosts strictly.
	KnownHosts string
	// Inventory is a generated TOML inventory ([ssh] user, identity_file,
	// known_hosts and one [[host]] per host with gpus = []).
	Inventory string

	script string
	id     string // fleet id from fleet.env; guards the crash reaper
	skip   string // why the fleet is not available here (Need skips)
	upErr  error  // why bringing it up failed (Need fails)

	// Main starts the fleet lazily, at the first Need.
	lazyOpts    Options
	lazyOnce    sync.Once
	lazyStarted bool

	// The hostile SFTP server (HostileSFTP), built once per fleet.
	proxyOnce sync.Once
	proxyBin  string
	proxyErr  error

	mu       sync.Mutex
	closed   bool
	reaper   *exec.Cmd
	reaperW  *os.File
	closeErr error
}

// Available reports why this machine cannot run a test fleet, or nil when it
// can: it needs root (for namespaces and mounts) and the tools the script
// uses.
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("testfleet needs Linux network namespaces, this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("testfleet needs root (network and mount namespaces)")
	}
	for _, tool := range []string{"/usr/sbin/sshd", "/usr/lib/openssh/sftp-server"} {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("testfleet needs OpenSSH server: %w", err)
		}
	}
	for _, tool := range []string{"ip", "unshare", "ssh-keygen", "flock", "useradd", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("testfleet needs %s: %w", tool, err)
		}
	}
	if err := checkCaps(); err != nil {
		return err
	}
	return nil
}

// checkCaps makes root without CAP_SYS_ADMIN/CAP_NET_ADMIN (an unprivileged
// container) count as unavailable rather than as a broken fleet.
func checkCaps() error {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("testfleet: read capabilities: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return fmt.Errorf("testfleet: parse CapEff %q: %w", hex, err)
		}
		const capNetAdmin, capSysAdmin = 12, 21
		if caps&(1<<capNetAdmin) == 0 || caps&(1<<capSysAdmin) == 0 {
			return errors.New("testfleet needs CAP_NET_ADMIN and CAP_SYS_ADMIN")
		}
		return nil
	}
	return nil
}

// Main brings the fleet up (when Available), runs the package's tests and
// tears the fleet down, returning m.Run's exit code for os.Exit. *fleet is
// always set, so Need can tell "not available here" (skip) from "broken"
// (fail). A fleet of the same name left by a crashed run is removed first,
// and a reaper process tears this one down should the test binary die
// without reaching Close (panic, timeout, signal). Each of also is set to
// the same fleet (a helper package shared by several test packages, such
// as internal/e2e/kit, keeps the calling binary's fleet there).
func Main(m *testing.M, opts Options, fleet **Fleet, also ...**Fleet) (code int) {
	f := &Fleet{User: User, lazyOpts: opts}
	*fleet = f
	for _, p := range also {
		*p = f
	}
	if err := Available(); err != nil {
		f.skip = err.Error()
		return m.Run()
	}
	// The fleet comes up at the first Need, not here: a run that selects
	// no fleet test (-run, -short, a fuzz worker) starts no sshd at all.
	defer func() {
		if !f.lazyStarted {
			return
		}
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "testfleet: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()
	return m.Run()
}

// ensureUp brings a Main fleet up once, at its first Need.
func (f *Fleet) ensureUp() {
	f.lazyOnce.Do(func() {
		if f.lazyOpts.N == 0 {
			return // made by Up, already running
		}
		f.lazyStarted = true
		if err := f.up(f.lazyOpts); err != nil {
			f.upErr = err
			fmt.Fprintf(os.Stderr, "testfleet: %v\n", err)
		}
	})
}

// Need skips t under -short, and when no fleet can run on this machine (not root, no sshd),
// except under CI=true where a missing fleet is a failure, so that CI never
// passes by skipping. A fleet that should have come up but did not always
// fails t.
func Need(t testing.TB, f *Fleet) {
	t.Helper()
	switch {
	case f == nil:
		t.Fatal("testfleet: no fleet; call fleettest.Main from TestMain")
		return
	}
	if testing.Short() {
		// make test-short is the unit-only run: no sshd, even as root.
		t.Skip("testfleet: fleet tests do not run under -short")
		return
	}
	if f.skip == "" {
		f.ensureUp()
	}
	switch {
	case f.upErr != nil:
		t.Fatalf("testfleet: fleet did not come up: %v", f.upErr)
	case f.skip != "":
		testenv.Need(t, "a test fleet", errors.New(f.skip))
	}
}

// SpareAddr is an address in the fleet's subnet that no host has (last
// is its last byte), for tests that move a host: the subnet depends on
// the slot (SlotEnv), so tests never write fleet addresses by hand.
func (f *Fleet) SpareAddr(last int) string {
	prefix := f.Hosts[0].Addr[:strings.LastIndexByte(f.Hosts[0].Addr, '.')+1]
	for {
		addr := prefix + strconv.Itoa(last)
		if !slices.ContainsFunc(f.Hosts, func(h Host) bool { return h.Addr == addr }) {
			return addr
		}
		last++
	}
}

// NeedUp brings up a fleet of a test's own, for a test that needs one
// shaped unlike its package's Main fleet, and closes it when t ends. It
// skips exactly when Need would: under -short, and when no fleet can run
// here (failing instead under CI=true).
func NeedUp(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("testfleet: fleet tests do not run under -short")
	}
	testenv.Need(t, "a test fleet", Available())
	f, err := Up(opts)
	if err != nil {
		t.Fatalf("testfleet: fleet did not come up: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("testfleet: %v", err)
		}
	})
	return f
}

// Up brings up a fleet outside of TestMain (tools, benchmarks that want
// their own). The caller must Close it.
func Up(opts Options) (*Fleet, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	f := &Fleet{User: User}
	if err := f.up(opts); err != nil {
		return nil, err
	}
	return f, nil
}

// SlotEnv names the variable that lets several checkouts run their fleet
// tests at once on one machine: slot k (1..7) appends k to every fleet's
// name and moves its subnet up by 30*k, so no two slots share a namespace,
// bridge or fleet directory (and none reaps the other's fleet as a
// leftover of a crashed run).
const SlotEnv = "DROVER_TESTFLEET_SLOT"

// slotted applies slot (SlotEnv's value) to opts; "" or "0" leaves them.
func slotted(opts Options, slot string) Options {
	k, err := strconv.Atoi(slot)
	if err != nil || k < 1 || k > 7 {
		return opts
	}
	opts.Name += strconv.Itoa(k)
	opts.Subnet += 30 * k
	return opts
}

func (f *Fleet) up(opts Options) error {
	if opts.N < 1 {
		return fmt.Errorf("testfleet %q: N must be at least 1, got %d", opts.Name, opts.N)
	}
	if opts.First == 0 {
		opts.First = 10
	}
	opts = slotted(opts, os.Getenv(SlotEnv))
	script, err := findScript()
	if err != nil {
		return err
	}
	f.script = script
	f.Dir = filepath.Join(os.TempDir(), "drover-testfleet-"+opts.Name)
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	args := []string{"up", strconv.Itoa(opts.N), f.Dir,
		"--name", opts.Name, "--subnet", strconv.Itoa(opts.Subnet), "--first", strconv.Itoa(opts.First)}
	if opts.TmpfsHomes {
		args = append(args, "--tmpfs-homes")
	}
	if opts.Shell != "" {
		args = append(args, "--shell", opts.Shell)
	}
	if _, err := f.run(ctx, args...); err != nil {
		return fmt.Errorf("bring up fleet %q (%d hosts, 10.231.%d.0/24): %w", opts.Name, opts.N, opts.Subnet, err)
	}
	env, err := readEnv(filepath.Join(f.Dir, "fleet.env"))
	if err != nil {
		return fmt.Errorf("fleet %q: %w", opts.Name, err)
	}
	f.id = env["FLEET_ID"]
	f.KeyFile = filepath.Join(f.Dir, "id_ed25519")
	f.KnownHosts = filepath.Join(f.Dir, "known_hosts")
	f.Inventory = filepath.Join(f.Dir, "fleet.toml")
	for i := range opts.N {
		f.Hosts = append(f.Hosts, Host{
			Name:  fmt.Sprintf("%s-h%d", opts.Name, i),
			Addr:  fmt.Sprintf("10.231.%d.%d", opts.Subnet, opts.First+i),
			NetNS: fmt.Sprintf("drover-%s-%d-h%d", opts.Name, opts.Subnet, i),
		})
	}
	if err := f.startReaper(); err != nil {
		_, _ = f.run(context.Background(), "down", f.Dir)
		return fmt.Errorf("fleet %q: %w", opts.Name, err)
	}
	return nil
}

// startReaper starts a detached process that tears the fleet down when this
// process dies: it holds the read end of a pipe whose write end only this
// process has, so EOF means we are gone. --if-id keeps it from removing a
// newer fleet of the same name brought up by a later run.
func (f *Fleet) startReaper() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start reaper: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", `cat >/dev/null; exec "$0" down "$1" --if-id "$2"`, f.script, f.Dir, f.id)
	cmd.Stdin = r
	// Own session: a Ctrl-C to the test's process group must not kill the
	// reaper before it has done its job. No stdout/stderr: go test waits
	// for those pipes to close.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start reaper: %w", err)
	}
	f.reaper, f.reaperW = cmd, w
	return nil
}

// Close tears the fleet down: every process in its namespaces is killed and
// the namespaces, links and files are removed. Closing twice is a no-op.
func (f *Fleet) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closeErr
	}
	f.closed = true
	if f.script == "" || f.Dir == "" {
		return nil
	}
	_, err := f.run(context.Background(), "down", f.Dir)
	if err != nil {
		f.closeErr = fmt.Errorf("tear down fleet in %s: %w", f.Dir, err)
	}
	if f.reaperW != nil {
		f.reaperW.Close()
		done := make(chan error, 1)
		go func() { done <- f.reaper.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = f.reaper.Process.Kill()
			<-done
		}
	}
	return f.closeErr
}

// ClusterHosts returns the fleet as cluster hosts ready to Dial: SSH as User
// on port 22 with the fleet's key and known_hosts, no GPUs.
func (f *Fleet) ClusterHosts() []config.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := make([]config.Host, len(f.Hosts))
	for i, h := range f.Hosts {
		hs[i] = config.Host{
			Name:         h.Name,
			Address:      h.Addr,
			Transport:    config.TransportSSH,
			User:         f.User,
			Port:         22,
			IdentityFile: f.KeyFile,
			KnownHosts:   f.KnownHosts,
			GPUs:         config.GPUSpec{},
		}
	}
	return hs
}

// Endpoints returns ClusterHosts as the transports take them (Dial,
// DialAll), for tests of packages that do not read job files.
func (f *Fleet) Endpoints() []cluster.Endpoint { return config.Endpoints(f.ClusterHosts()) }

// Move gives host i the address newAddr (inside the fleet's /24), as when a
// machine comes back from maintenance with another IP: the old address stops
// answering (connections to it hang), the sshd listener is restarted on the
// new one, the host's processes keep running, known_hosts gains the new
// address and the inventory and every host's /etc/hosts show it.
func (f *Fleet) Move(i int, newAddr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(i); err != nil {
		return err
	}
	if _, err := f.run(context.Background(), "move", strconv.Itoa(i), newAddr, f.Dir); err != nil {
		return fmt.Errorf("move %s (%s) to %s: %w", f.Hosts[i].Name, f.Hosts[i].Addr, newAddr, err)
	}
	f.Hosts[i].Addr = newAddr
	return nil
}

// HostKeyFile is host i's ed25519 host key (the public half is beside it,
// with .pub), for tests that sign it into a host certificate.
func (f *Fleet) HostKeyFile(i int) string {
	return filepath.Join(f.hostDir(i), "ssh_host_ed25519_key")
}

func (f *Fleet) hostDir(i int) string {
	return filepath.Join(f.Dir, "hosts", fmt.Sprintf("%s-h%d", f.name(), i))
}

// name is the fleet's name as the script knows it (slot included).
func (f *Fleet) name() string {
	n := f.Hosts[0].Name
	return n[:strings.LastIndex(n, "-h")]
}

// SetSSHD puts extra (sshd_config lines) first in host i's sshd_config, so
// that they win over the fleet's defaults, and restarts its sshd listener
// (sessions survive). "" restores the defaults. Tests that call it restore
// the host in a Cleanup.
func (f *Fleet) SetSSHD(i int, extra string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(i); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(f.hostDir(i), "sshd_extra"), []byte(extra), 0o644); err != nil {
		return fmt.Errorf("configure sshd of %s: %w", f.Hosts[i].Name, err)
	}
	if _, err := f.run(context.Background(), "restart", strconv.Itoa(i), f.Dir); err != nil {
		return fmt.Errorf("restart sshd of %s: %w", f.Hosts[i].Name, err)
	}
	return nil
}

// SecondNIC(true) gives every host a second network interface, mgmt0, that
// nothing on the other hosts can reach (10.232.X.(First+i)/24, a veth to nowhere),
// routes the hosts' default route through it and makes the host names
// resolve to its addresses: a machine whose hostname and default route
// belong to a management network while the cluster network is eth0. What
// picks its interface from the hostname or the default route (gloo, NCCL)
// then fails unless told to use eth0. SecondNIC(false) undoes it.
func (f *Fleet) SecondNIC(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(0); err != nil {
		return err
	}
	state := "off"
	if on {
		state = "on"
	}
	if _, err := f.run(context.Background(), "second-nic", f.Dir, state); err != nil {
		return fmt.Errorf("second NIC %s: %w", state, err)
	}
	return nil
}

// Cut takes host i off the network (its link goes down inside its
// namespace): connections to it hang and time out, as with a pulled cable;
// its processes keep running.
func (f *Fleet) Cut(i int) error {
	return f.simple("cut", i)
}

// Heal undoes Cut.
func (f *Fleet) Heal(i int) error {
	return f.simple("heal", i)
}

func (f *Fleet) simple(op string, i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(i); err != nil {
		return err
	}
	if _, err := f.run(context.Background(), op, strconv.Itoa(i), f.Dir); err != nil {
		return fmt.Errorf("%s %s (%s): %w", op, f.Hosts[i].Name, f.Hosts[i].Addr, err)
	}
	return nil
}

// Exec runs args as root inside host i's network namespace with its home
// mounted at /home/drovertest, and returns its standard output; stderr is
// part of the error. It lets tests look at or disturb a host behind the
// back of the code under test.
func (f *Fleet) Exec(i int, args ...string) ([]byte, error) {
	f.mu.Lock()
	if err := f.check(i); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	name := f.Hosts[i].Name
	f.mu.Unlock()
	if len(args) == 0 {
		return nil, fmt.Errorf("exec on %s: no command", name)
	}
	out, err := f.run(context.Background(), append([]string{"exec", strconv.Itoa(i), f.Dir, "--"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("exec %q on %s: %w", args, name, err)
	}
	return out, nil
}

// ExecInLogins runs args as root in the mount namespace that host i's sshd
// and every login to it share, and returns its standard output. Unlike
// Exec, which gets a fresh namespace, a mount made here is what later
// logins to that host (and only that host) see: tests use it to give one
// host another `uname`.
func (f *Fleet) ExecInLogins(i int, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(i); err != nil {
		return nil, err
	}
	pidFile := filepath.Join(f.Dir, "hosts", f.Hosts[i].Name, "sshd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("find the sshd of %s: %w", f.Hosts[i].Name, err)
	}
	cmd := exec.Command("nsenter", append([]string{"--target", strings.TrimSpace(string(b)), "--mount", "--"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("on %s (sshd's mount namespace): %v: %w: %s", f.Hosts[i].Name, args, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Pids lists the processes running in host i's network namespace except the
// sshd listener: what drover started there (and the sshd sessions serving
// it). Tests use it to prove that nothing is left behind.
func (f *Fleet) Pids(i int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(i); err != nil {
		return nil, err
	}
	out, err := f.run(context.Background(), "pids", strconv.Itoa(i), f.Dir)
	if err != nil {
		return nil, fmt.Errorf("list processes on %s: %w", f.Hosts[i].Name, err)
	}
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("list processes on %s: bad pid %q", f.Hosts[i].Name, line)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

func (f *Fleet) check(i int) error {
	if f.closed {
		return errors.New("testfleet: fleet is closed")
	}
	if f.script == "" {
		return errors.New("testfleet: fleet is not up")
	}
	if i < 0 || i >= len(f.Hosts) {
		return fmt.Errorf("testfleet: host %d out of range (fleet has %d hosts)", i, len(f.Hosts))
	}
	return nil
}

// run runs the script and returns its stdout; a failure carries its stderr.
func (f *Fleet) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, f.script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return stdout.Bytes(), fmt.Errorf("scripts/testfleet %s: %w", args[0], err)
		}
		return stdout.Bytes(), fmt.Errorf("scripts/testfleet %s: %w: %s", args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// findScript locates scripts/testfleet at the module root: upwards from the
// working directory (go test runs in the package directory), then from this
// source file.
func findScript() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, "scripts", "testfleet")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("testfleet: scripts/testfleet not found above %q", starts)
}

// readEnv reads the script's KEY=VALUE state file.
func readEnv(path string) (map[string]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read fleet state: %w", err)
	}
	defer file.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(file, 1<<20))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read fleet state %s: %w", path, err)
	}
	return env, nil
}

// SetLoginShell makes shell the login shell of the fleet's user on host i
// only: a copy of /etc/passwd that says so is bind-mounted over it in the
// mount namespace host i's sshd and its logins share (ExecInLogins), so
// that later logins to that host run it. "" undoes it. Tests give a host
// bash (with a chatty .bashrc), nologin or /bin/false this way, and undo
// it in a Cleanup.
func (f *Fleet) SetLoginShell(i int, shell string) error {
	if shell == "" {
		if _, err := f.ExecInLogins(i, "umount", "/etc/passwd"); err != nil {
			return fmt.Errorf("restore the login shell of %s: %w", f.Hosts[i].Name, err)
		}
		return nil
	}
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for k, l := range lines {
		if fs := strings.Split(l, ":"); len(fs) == 7 && fs[0] == User {
			fs[6] = shell
			lines[k] = strings.Join(fs, ":")
		}
	}
	f.mu.Lock()
	if err := f.check(i); err != nil {
		f.mu.Unlock()
		return err
	}
	passwd := filepath.Join(f.hostDir(i), "passwd")
	f.mu.Unlock()
	if err := os.WriteFile(passwd, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("set the login shell of %s: %w", f.Hosts[i].Name, err)
	}
	if _, err := f.ExecInLogins(i, "mount", "--bind", passwd, "/etc/passwd"); err != nil {
		return fmt.Errorf("set the login shell of %s to %s: %w", f.Hosts[i].Name, shell, err)
	}
	return nil
}
