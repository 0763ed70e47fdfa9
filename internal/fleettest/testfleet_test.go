package fleettest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	subnet = 19
	n      = 3
	// reaperChildEnv turns the test binary into the crashing child of
	// TestReaperTearsDownAfterCrash.
	reaperChildEnv = "TESTFLEET_REAPER_CHILD"
)

var fleet *Fleet

// slot is the Main fleet's options as DROVER_TESTFLEET_SLOT moves them:
// what the tests expect names and addresses to be.
var slot = slotted(Options{Name: "tf", N: n, Subnet: subnet}, os.Getenv(SlotEnv))

func TestMain(m *testing.M) {
	if os.Getenv(reaperChildEnv) != "" {
		os.Exit(m.Run())
	}
	os.Exit(Main(m, Options{Name: "tf", N: n, Subnet: subnet}, &fleet))
}

// sshCmd builds a system ssh client command that verifies the host key
// strictly against the fleet's known_hosts.
func sshCmd(ctx context.Context, f *Fleet, addr string, extra []string, command string) *exec.Cmd {
	args := []string{
		"-i", f.KeyFile,
		"-o", "UserKnownHostsFile=" + f.KnownHosts,
		"-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes",
		"-o", "ConnectTimeout=5",
		"-o", "LogLevel=ERROR",
	}
	args = append(args, extra...)
	args = append(args, f.User+"@"+addr, command)
	return exec.CommandContext(ctx, "ssh", args...)
}

// ssh runs command on addr and returns its trimmed stdout.
func ssh(t *testing.T, f *Fleet, addr, command string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := sshCmd(ctx, f, addr, nil, command)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ssh %s %q: %w: %s", addr, command, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "22"), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestClusterHostsAndInventory(t *testing.T) {
	Need(t, fleet)
	hs := fleet.ClusterHosts()
	require.Len(t, hs, n)
	for i, h := range hs {
		assert.Equal(t, config.Host{
			Name:         fmt.Sprintf("%s-h%d", slot.Name, i),
			Address:      fmt.Sprintf("10.231.%d.%d", slot.Subnet, 10+i),
			Transport:    config.TransportSSH,
			User:         "drovertest",
			Port:         22,
			IdentityFile: fleet.KeyFile,
			KnownHosts:   fleet.KnownHosts,
		}, h)
		assert.Equal(t, fmt.Sprintf("drover-%s-%d-h%d", slot.Name, slot.Subnet, i), fleet.Hosts[i].NetNS)
	}
	assert.FileExists(t, fleet.KeyFile)

	var inv struct {
		SSH struct {
			User         string `toml:"user"`
			IdentityFile string `toml:"identity_file"`
			KnownHosts   string `toml:"known_hosts"`
		} `toml:"ssh"`
		Host []struct {
			Name    string `toml:"name"`
			Address string `toml:"address"`
			GPUs    []int  `toml:"gpus"`
		} `toml:"host"`
	}
	md, err := toml.DecodeFile(fleet.Inventory, &inv)
	require.NoError(t, err)
	assert.Empty(t, md.Undecoded(), "inventory keys nobody reads")
	assert.Equal(t, "drovertest", inv.SSH.User)
	assert.Equal(t, fleet.KeyFile, inv.SSH.IdentityFile)
	assert.Equal(t, fleet.KnownHosts, inv.SSH.KnownHosts)
	require.Len(t, inv.Host, n)
	for i, h := range inv.Host {
		assert.Equal(t, hs[i].Name, h.Name)
		assert.Equal(t, hs[i].Address, h.Address)
		assert.NotNil(t, h.GPUs, "gpus = [] must be written")
		assert.Empty(t, h.GPUs)
	}

	// Every host has its own host key.
	data, err := os.ReadFile(fleet.KnownHosts)
	require.NoError(t, err)
	keys := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(line)
		require.Len(t, fields, 3, "known_hosts line %q", line)
		keys[fields[0]] = fields[2]
	}
	seen := map[string]bool{}
	for _, h := range hs {
		key, ok := keys[h.Address]
		require.True(t, ok, "%s missing from known_hosts", h.Address)
		assert.False(t, seen[key], "host key of %s shared with another host", h.Name)
		seen[key] = true
	}
}

func TestSSHLoginEveryHost(t *testing.T) {
	Need(t, fleet)
	for i, h := range fleet.ClusterHosts() {
		t.Run(h.Name, func(t *testing.T) {
			out, err := ssh(t, fleet, h.Address, "id -un; hostname; getent hosts $(hostname) | cut -d' ' -f1; echo $HOME; ls -A")
			require.NoError(t, err)
			lines := strings.Split(out, "\n")
			require.GreaterOrEqual(t, len(lines), 4, "output %q", out)
			assert.Equal(t, "drovertest", lines[0])
			assert.Equal(t, h.Name, lines[1], "hostname")
			assert.Equal(t, h.Address, lines[2], "hostname must resolve to the host's own address")
			assert.Equal(t, "/home/drovertest", lines[3])
			for _, f := range lines[4:] {
				assert.NotContains(t, []string{".profile", ".bashrc"}, f, "home must be clean")
			}
			assert.NotEmpty(t, fleet.Hosts[i].NetNS)
		})
	}
}

func TestSSHRefusesUnknownHostKey(t *testing.T) {
	Need(t, fleet)
	// Host 1's address with host 0's key in known_hosts must be refused:
	// proves strict checking really checks, i.e. the keys are per host.
	data, err := os.ReadFile(fleet.KnownHosts)
	require.NoError(t, err)
	var key0 string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == fleet.Hosts[0].Addr {
			key0 = f[1] + " " + f[2]
		}
	}
	require.NotEmpty(t, key0)
	wrong := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(wrong, []byte(fleet.Hosts[1].Addr+" "+key0+"\n"), 0o644))
	f := &Fleet{User: fleet.User, KeyFile: fleet.KeyFile, KnownHosts: wrong}
	_, err = ssh(t, f, fleet.Hosts[1].Addr, "true")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HOST IDENTIFICATION HAS CHANGED")
}

func TestHomeIsPrivate(t *testing.T) {
	Need(t, fleet)
	h0, h1 := fleet.Hosts[0].Addr, fleet.Hosts[1].Addr
	_, err := ssh(t, fleet, h0, "echo secret > private.txt")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = fleet.Exec(0, "rm", "-f", "/home/drovertest/private.txt") })

	out, err := ssh(t, fleet, h0, "cat private.txt")
	require.NoError(t, err)
	assert.Equal(t, "secret", out)
	out, err = ssh(t, fleet, h1, "test -e private.txt && echo present || echo absent")
	require.NoError(t, err)
	assert.Equal(t, "absent", out, "host 1 sees host 0's home")
	assert.NoFileExists(t, "/home/drovertest/private.txt", "host home leaked into the root mount namespace")
	assert.FileExists(t, filepath.Join(fleet.Dir, "hosts", fleet.Hosts[0].Name, "home", "private.txt"))
}

func TestSFTP(t *testing.T) {
	Need(t, fleet)
	local := filepath.Join(t.TempDir(), "payload.txt")
	require.NoError(t, os.WriteFile(local, []byte("via sftp\n"), 0o644))
	batch := filepath.Join(t.TempDir(), "batch")
	require.NoError(t, os.WriteFile(batch, []byte("put "+local+" sftp.txt\nls -l sftp.txt\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sftp", "-b", batch,
		"-i", fleet.KeyFile,
		"-o", "UserKnownHostsFile="+fleet.KnownHosts,
		"-o", "StrictHostKeyChecking=yes",
		"drovertest@"+fleet.Hosts[2].Addr).CombinedOutput()
	require.NoError(t, err, "sftp: %s", out)
	t.Cleanup(func() { _, _ = fleet.Exec(2, "rm", "-f", "/home/drovertest/sftp.txt") })

	got, err := fleet.Exec(2, "stat", "-c", "%U", "/home/drovertest/sftp.txt")
	require.NoError(t, err)
	assert.Equal(t, "drovertest", strings.TrimSpace(string(got)))
	got, err = fleet.Exec(2, "cat", "/home/drovertest/sftp.txt")
	require.NoError(t, err)
	assert.Equal(t, "via sftp\n", string(got))
}

func TestHostsReachEachOther(t *testing.T) {
	Need(t, fleet)
	for _, target := range []string{fleet.Hosts[1].Addr, fleet.Hosts[1].Name} {
		out, err := fleet.Exec(0, "bash", "-c", `exec 3<>"/dev/tcp/$1/22" && head -c 7 <&3`, "bash", target)
		require.NoError(t, err, "host 0 -> %s", target)
		assert.Equal(t, "SSH-2.0", string(out))
	}

	// TCP forwarding through host 0 to host 1 (what ProxyJump does).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proxy := fmt.Sprintf("ssh -i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes -W %%h:%%p drovertest@%s",
		fleet.KeyFile, fleet.KnownHosts, fleet.Hosts[0].Addr)
	out, err := sshCmd(ctx, fleet, fleet.Hosts[1].Addr, []string{"-o", "ProxyCommand=" + proxy}, "hostname").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, fleet.Hosts[1].Name, strings.TrimSpace(string(out)))
}

func TestCutAndHeal(t *testing.T) {
	Need(t, fleet)
	addr := fleet.Hosts[2].Addr
	require.True(t, reachable(addr))
	require.NoError(t, fleet.Cut(2))
	t.Cleanup(func() { _ = fleet.Heal(2) })
	testenv.WaitFor(t, 10*time.Second, "the cut host to be unreachable", func() bool { return !reachable(addr) })
	_, err := ssh(t, fleet, addr, "true")
	assert.Error(t, err)
	out, err := fleet.Exec(0, "bash", "-c", `timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/22"' bash "$1" && echo open || echo closed`, "bash", addr)
	require.NoError(t, err)
	assert.Equal(t, "closed", strings.TrimSpace(string(out)), "host 0 still reaches the cut host")

	require.NoError(t, fleet.Heal(2))
	testenv.WaitFor(t, 10*time.Second, "the healed host to be reachable", func() bool { return reachable(addr) })
	out2, err := ssh(t, fleet, addr, "hostname")
	require.NoError(t, err)
	assert.Equal(t, fleet.Hosts[2].Name, out2)
}

func TestMove(t *testing.T) {
	Need(t, fleet)
	old := fleet.Hosts[2].Addr
	newAddr := fleet.SpareAddr(50)

	// A process started before the move keeps running (its connection to
	// the old address does not: that is the point of moving).
	out, err := ssh(t, fleet, old, "nohup sleep 1000 >/dev/null 2>&1 </dev/null & echo $!")
	require.NoError(t, err)
	sleepPid, err := strconv.Atoi(out)
	require.NoError(t, err)
	testenv.SignalAtCleanup(t, sleepPid, syscall.SIGKILL, false)

	require.NoError(t, fleet.Move(2, newAddr))
	t.Cleanup(func() {
		if err := fleet.Move(2, old); err != nil {
			t.Errorf("move back: %v", err)
		}
	})
	assert.Equal(t, newAddr, fleet.ClusterHosts()[2].Address)
	assert.Equal(t, newAddr, fleet.Hosts[2].Addr)

	out, err = ssh(t, fleet, newAddr, "hostname; getent hosts $(hostname) | cut -d' ' -f1")
	require.NoError(t, err, "strict ssh to the new address")
	assert.Equal(t, fleet.Hosts[2].Name+"\n"+newAddr, out)
	assert.False(t, reachable(old), "old address still answers")
	inv, err := os.ReadFile(fleet.Inventory)
	require.NoError(t, err)
	assert.Contains(t, string(inv), `address = "`+newAddr+`"`)
	assert.NotContains(t, string(inv), `address = "`+old+`"`)
	// Other hosts resolve the moved host's name to its new address.
	got, err := fleet.Exec(0, "getent", "hosts", fleet.Hosts[2].Name)
	require.NoError(t, err)
	assert.Equal(t, newAddr, strings.Fields(string(got))[0])

	pids, err := fleet.Pids(2)
	require.NoError(t, err)
	assert.Contains(t, pids, sleepPid, "process did not survive the move")
}

func TestMoveRejects(t *testing.T) {
	Need(t, fleet)
	for _, addr := range []string{
		"10.231.99.50",                            // another subnet
		fmt.Sprintf("10.231.%d.1", slot.Subnet),   // the bridge
		fmt.Sprintf("10.231.%d.256", slot.Subnet), // not an address
		fleet.Hosts[0].Addr,                       // taken
		"10.231.19.50; touch /tmp/testfleet-x",    // not an address at all
	} {
		t.Run(addr, func(t *testing.T) {
			assert.Error(t, fleet.Move(1, addr))
			assert.Equal(t, fmt.Sprintf("10.231.%d.11", slot.Subnet), fleet.Hosts[1].Addr)
		})
	}
	assert.Error(t, fleet.Move(n, "10.231.19.60"), "index out of range")
	assert.Error(t, fleet.Cut(-1))
}

func TestExec(t *testing.T) {
	Need(t, fleet)
	out, err := fleet.Exec(1, "sh", "-c", "id -u; hostname; ip -4 -o addr show dev eth0 | awk '{print $4}'")
	require.NoError(t, err)
	assert.Equal(t, "0\n"+fleet.Hosts[1].Name+"\n"+fleet.Hosts[1].Addr+"/24\n", string(out))

	_, err = fleet.Exec(1, "sh", "-c", "echo oops >&2; exit 3")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "oops")
	_, err = fleet.Exec(1)
	assert.Error(t, err)
}

func TestPids(t *testing.T) {
	Need(t, fleet)
	// Sessions of earlier tests may still be exiting.
	testenv.WaitFor(t, 10*time.Second, "host 1 to be idle (the sshd listener is not listed)", func() bool {
		pids, err := fleet.Pids(1)
		return err == nil && len(pids) == 0
	})

	_, err := ssh(t, fleet, fleet.Hosts[1].Addr, "nohup sleep 1000 >/dev/null 2>&1 </dev/null &")
	require.NoError(t, err)
	var sleepPid int
	testenv.WaitFor(t, 10*time.Second, "the sleep started over ssh to be listed", func() bool {
		pids, err := fleet.Pids(1)
		if err != nil {
			return false
		}
		for _, p := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if strings.TrimSpace(string(comm)) == "sleep" {
				sleepPid = p
				return true
			}
		}
		return false
	})
	other, err := fleet.Pids(0)
	require.NoError(t, err)
	assert.NotContains(t, other, sleepPid, "host 0 lists host 1's process")

	require.NoError(t, syscall.Kill(sleepPid, syscall.SIGKILL))
	testenv.WaitFor(t, 10*time.Second, "the killed sleep to leave the list", func() bool {
		pids, err := fleet.Pids(1)
		return err == nil && !slices.Contains(pids, sleepPid)
	})
}

// netState lists this package's namespaces and links (those of its subnet),
// to prove that Close/down remove what up created and nothing else. Other
// packages' fleets come and go concurrently under `go test ./...`, so the
// machine-wide lists cannot be compared.
func netState(t *testing.T) (netns, links []string) {
	t.Helper()
	defer func() {
		netns = slices.DeleteFunc(netns, func(n string) bool { return !strings.Contains(n, fmt.Sprintf("-%d-h", slot.Subnet)) })
		links = slices.DeleteFunc(links, func(n string) bool {
			return !strings.HasPrefix(n, fmt.Sprintf("dt%dx", slot.Subnet)) && n != fmt.Sprintf("dtbr%d", slot.Subnet)
		})
	}()
	out, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			netns = append(netns, f[0])
		}
	}
	entries, err := os.ReadDir("/sys/class/net")
	require.NoError(t, err)
	for _, e := range entries {
		links = append(links, e.Name())
	}
	slices.Sort(netns)
	return netns, links
}

func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// A zombie waiting for init to reap it has nothing left.
	fields := strings.Fields(string(data))
	return len(fields) > 2 && fields[2] == "Z"
}

func TestCloseLeavesNothing(t *testing.T) {
	Need(t, fleet)
	nsBefore, linksBefore := netState(t)
	f, err := Up(Options{Name: "tfc", N: 2, Subnet: subnet, First: 100})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = f.Close()
		}
	})
	nsUp, linksUp := netState(t)
	assert.Len(t, nsUp, len(nsBefore)+2)
	assert.Len(t, linksUp, len(linksBefore)+2, "one veth per host, bridge shared")

	out, err := ssh(t, f, f.Hosts[1].Addr, "nohup sleep 1000 >/dev/null 2>&1 </dev/null & echo $!")
	require.NoError(t, err)
	pids, err := f.Pids(1)
	require.NoError(t, err)
	require.NotEmpty(t, pids)
	sleepPid, err := strconv.Atoi(out)
	require.NoError(t, err)

	require.NoError(t, f.Close())
	closed = true
	nsAfter, linksAfter := netState(t)
	assert.Equal(t, nsBefore, nsAfter)
	assert.Equal(t, linksBefore, linksAfter)
	assert.Contains(t, linksAfter, fmt.Sprintf("dtbr%d", slot.Subnet), "bridge still used by fleet tf")
	testenv.WaitFor(t, 10*time.Second, "the process to end with Close", func() bool { return processGone(sleepPid) })
	for _, p := range pids {
		assert.True(t, processGone(p), "pid %d survived Close", p)
	}
	assert.NoDirExists(t, f.Dir)
	assert.NoError(t, f.Close(), "second Close")
	_, err = f.Pids(0)
	assert.Error(t, err, "Pids after Close")
	// The main fleet is untouched.
	_, err = ssh(t, fleet, fleet.Hosts[0].Addr, "true")
	assert.NoError(t, err)
}

func script(t *testing.T) string {
	t.Helper()
	s, err := findScript()
	require.NoError(t, err)
	return s
}

func runScript(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(script(t), args...).CombinedOutput()
	require.NoError(t, err, "testfleet %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func TestScriptIdempotent(t *testing.T) {
	Need(t, fleet)
	// Not t.TempDir(): sshd reads authorized_keys in DIR as the login user,
	// so DIR's parents must be searchable by it.
	dir, err := os.MkdirTemp("", "testfleet-idem-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	nsBefore, linksBefore := netState(t)
	up := []string{"up", "2", dir, "--name", slot.Name + "s", "--subnet", strconv.Itoa(slot.Subnet), "--first", "120"}
	runScript(t, up...)
	first, err := os.ReadFile(filepath.Join(dir, "known_hosts"))
	require.NoError(t, err)
	runScript(t, up...) // over a live fleet: tears it down first
	second, err := os.ReadFile(filepath.Join(dir, "known_hosts"))
	require.NoError(t, err)
	assert.NotEqual(t, string(first), string(second), "second up must make fresh host keys")
	nsUp, linksUp := netState(t)
	assert.Len(t, nsUp, len(nsBefore)+2)
	assert.Len(t, linksUp, len(linksBefore)+2)

	f := &Fleet{User: User, KeyFile: filepath.Join(dir, "id_ed25519"), KnownHosts: filepath.Join(dir, "known_hosts")}
	out, err := ssh(t, f, fmt.Sprintf("10.231.%d.121", slot.Subnet), "hostname")
	require.NoError(t, err)
	assert.Equal(t, slot.Name+"s-h1", out)

	runScript(t, "down", dir)
	runScript(t, "down", dir)
	nsAfter, linksAfter := netState(t)
	assert.Equal(t, nsBefore, nsAfter)
	assert.Equal(t, linksBefore, linksAfter)
	assert.NoDirExists(t, dir)
}

func TestScriptDownHalfBuilt(t *testing.T) {
	Need(t, fleet)
	dir := t.TempDir()
	nsBefore, _ := netState(t)
	// What a crash right after creating the first namespace leaves.
	ns := fmt.Sprintf("drover-%sh-%d-h0", slot.Name, slot.Subnet)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fleet.env"),
		[]byte(fmt.Sprintf("FLEET_NAME=%sh\nFLEET_SUBNET=%d\nFLEET_N=2\nFLEET_FIRST=130\nFLEET_ID=x\n", slot.Name, slot.Subnet)), 0o644))
	runOK := func(args ...string) {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	runOK("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	sleeper := exec.Command("ip", "netns", "exec", ns, "sleep", "1000")
	require.NoError(t, sleeper.Start())
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()

	runScript(t, "down", dir, "--if-id", "other") // not ours: no-op
	nsMid, _ := netState(t)
	assert.Contains(t, nsMid, ns, "down --if-id with another id removed the fleet")

	runScript(t, "down", dir)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("process in the half-built fleet's namespace survived down")
	}
	nsAfter, _ := netState(t)
	assert.Equal(t, nsBefore, nsAfter)
	assert.NoDirExists(t, dir)
}

func TestScriptUsage(t *testing.T) {
	out, err := exec.Command(script(t), "--help").CombinedOutput()
	require.NoError(t, err)
	for _, cmd := range []string{"up N DIR", "down DIR", "move I NEWADDR DIR", "cut I DIR", "heal I DIR", "exec I DIR", "pids I DIR"} {
		assert.Contains(t, string(out), cmd)
	}
	err = exec.Command(script(t), "bogus").Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
}

// TestReaperChild is the child of TestReaperTearsDownAfterCrash: it brings a
// fleet up and blocks until it is killed.
func TestReaperChild(t *testing.T) {
	if os.Getenv(reaperChildEnv) == "" {
		t.Skip("only runs as the child of TestReaperTearsDownAfterCrash")
	}
	f, err := Up(Options{Name: "tfr", N: 1, Subnet: subnet, First: 140})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	fmt.Println("UP", f.Dir)
	select {}
}

func TestReaperTearsDownAfterCrash(t *testing.T) {
	Need(t, fleet)
	nsBefore, linksBefore := netState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReaperChild$", "-test.count=1")
	child.Env = append(os.Environ(), reaperChildEnv+"=1")
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	var dir string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "UP "); ok {
			dir = rest
			break
		}
		require.False(t, strings.HasPrefix(sc.Text(), "ERR"), "child: %s", sc.Text())
	}
	require.NotEmpty(t, dir, "child never brought its fleet up")
	nsUp, _ := netState(t)
	require.Len(t, nsUp, len(nsBefore)+1)

	require.NoError(t, child.Process.Kill()) // SIGKILL: no Close, no defers
	_ = child.Wait()
	testenv.WaitFor(t, 20*time.Second, "the crashed child's fleet to be torn down", func() bool {
		ns, links := netState(t)
		return slices.Equal(ns, nsBefore) && slices.Equal(links, linksBefore)
	})
	testenv.WaitFor(t, 5*time.Second, "the crashed child's fleet directory to go", func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	})
}

// fakeTB records what Need does instead of stopping the test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped, f.msg = true, fmt.Sprint(args...) }
func (f *fakeTB) Fatal(args ...any) { f.failed, f.msg = true, fmt.Sprint(args...) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
}

func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		fleet         *Fleet
		ci            string
		skip, fail    bool
		msgContaining string
	}{
		{name: "no Main", fleet: nil, fail: true, msgContaining: "TestMain"},
		{name: "unavailable", fleet: &Fleet{skip: "needs root"}, skip: true, msgContaining: "needs root"},
		{name: "unavailable under CI", fleet: &Fleet{skip: "needs root"}, ci: "true", fail: true, msgContaining: "needs root"},
		{name: "CI=false still skips", fleet: &Fleet{skip: "needs root"}, ci: "false", skip: true},
		{name: "broken", fleet: &Fleet{upErr: errors.New("sshd died")}, fail: true, msgContaining: "sshd died"},
		{name: "up", fleet: &Fleet{script: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			tb := &fakeTB{}
			Need(tb, tc.fleet)
			if testing.Short() && tc.fleet != nil {
				// Under -short every fleet test skips, whatever the fleet.
				tc.skip, tc.fail, tc.msgContaining = true, false, "-short"
			}
			assert.Equal(t, tc.skip, tb.skipped, "skipped")
			assert.Equal(t, tc.fail, tb.failed, "failed")
			assert.Contains(t, tb.msg, tc.msgContaining)
		})
	}
}

// TestTmpfsHomes: with TmpfsHomes the hosts' homes live on a tmpfs of the
// fleet's own, which Close unmounts before removing the directory.
func TestTmpfsHomes(t *testing.T) {
	Need(t, fleet)
	f, err := Up(Options{Name: "tft", N: 1, Subnet: subnet, First: 110, TmpfsHomes: true})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = f.Close()
		}
	})
	hosts := filepath.Join(f.Dir, "hosts")
	out, err := f.Exec(0, "stat", "-f", "-c", "%T", "/home/"+User)
	require.NoError(t, err)
	assert.Equal(t, "tmpfs", strings.TrimSpace(string(out)), "the home's filesystem as the host sees it")
	_, err = ssh(t, f, f.Hosts[0].Addr, "echo hi > on-tmpfs.txt")
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(hosts, f.Hosts[0].Name, "home", "on-tmpfs.txt"))

	require.NoError(t, f.Close())
	closed = true
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), hosts, "tmpfs still mounted after Close")
	assert.NoDirExists(t, f.Dir)

	// The main fleet's homes are on this machine's filesystem.
	out, err = fleet.Exec(0, "stat", "-f", "-c", "%T", "/home/"+User)
	require.NoError(t, err)
	assert.NotEqual(t, "tmpfs", strings.TrimSpace(string(out)))
}

func TestSlotted(t *testing.T) {
	base := Options{Name: "cl", N: 2, Subnet: 11}
	for _, tc := range []struct {
		slot   string
		name   string
		subnet int
	}{
		{"", "cl", 11},
		{"0", "cl", 11},
		{"x", "cl", 11},
		{"8", "cl", 11},
		{"7", "cl7", 221},
		{"1", "cl1", 41},
		{"6", "cl6", 191},
	} {
		got := slotted(base, tc.slot)
		if got.Name != tc.name || got.Subnet != tc.subnet {
			t.Errorf("slotted(%q) = %s/%d, want %s/%d", tc.slot, got.Name, got.Subnet, tc.name, tc.subnet)
		}
	}
}

// TestShell: Options.Shell makes the login user's shell bash on that
// fleet's hosts only (commands over SSH run under it, with /etc/skel's
// dotfiles in the home), while other fleets and the machine's own account
// keep /bin/sh.
func TestShell(t *testing.T) {
	Need(t, fleet)
	f, err := Up(Options{Name: "tfb", N: 1, Subnet: subnet, First: 120, Shell: "/bin/bash"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })

	out, err := ssh(t, f, f.Hosts[0].Addr, `echo "$0 ${BASH_VERSION:+bash}"`)
	require.NoError(t, err)
	assert.Equal(t, "bash bash", out, "the command line runs under the login shell bash")
	out, err = ssh(t, f, f.Hosts[0].Addr, "ls -A")
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(out), ".bashrc", "a fresh account's dotfiles")

	out, err = ssh(t, fleet, fleet.Hosts[0].Addr, `echo "$0 ${BASH_VERSION:-none}"`)
	require.NoError(t, err)
	assert.Equal(t, "sh none", out, "the package's fleet keeps /bin/sh")
	pw, err := exec.Command("getent", "passwd", User).Output()
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.TrimSpace(string(pw)), ":/bin/sh"), "the machine's account is unchanged: %s", pw)
}

// A slow link is a namespace on the fleet's bridge with a token bucket on
// both ends of its veth, from which the hosts are reachable; its bytes
// are counted; Close removes it.
func TestSlowLink(t *testing.T) {
	Need(t, fleet)
	l, err := fleet.SlowLink("50mbit")
	require.NoError(t, err)
	for _, args := range [][]string{{"ip", "netns", "exec", l.NS, "tc", "qdisc", "show", "dev", "eth0"}, {"tc", "qdisc", "show", "dev", l.veth}} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "tbf", "%v", args)
		assert.Contains(t, string(out), "rate 50Mbit", "%v", args)
	}
	before, err := l.Bytes()
	require.NoError(t, err)
	out, err := exec.Command("ip", "netns", "exec", l.NS, "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/22; head -c 4 <&3", fleet.Hosts[0].Addr)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "SSH-", string(out), "a host's sshd answers across the link")
	after, err := l.Bytes()
	require.NoError(t, err)
	assert.Greater(t, after, before)
	require.NoError(t, l.Close())
	out, _ = exec.Command("ip", "netns", "list").CombinedOutput()
	assert.NotContains(t, string(out), l.NS)
}

// probeTCP says how a TCP connection from host from to addr:port ends
// within 3 s: "open", "refused" (nothing listens; the host answered) or
// "timeout" (the packets were dropped).
func probeTCP(t *testing.T, from int, addr, port string) string {
	t.Helper()
	out, err := fleet.Exec(from, "bash", "-c", `timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' bash "$1" "$2" 2>/dev/null; echo $?`, "bash", addr, port)
	require.NoError(t, err)
	switch strings.TrimSpace(string(out)) {
	case "0":
		return "open"
	case "124":
		return "timeout"
	}
	return "refused"
}

// Firewall drops host 0's connections to host 1 but SSH, leaves host 2's
// alone, and its undo restores host 0's.
func TestFirewall(t *testing.T) {
	Need(t, fleet)
	addr := fleet.Hosts[1].Addr
	require.Equal(t, "refused", probeTCP(t, 0, addr, "7123"), "nothing listens on 7123")
	undo, err := fleet.Firewall(1, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = undo() })
	assert.Equal(t, "timeout", probeTCP(t, 0, addr, "7123"), "host 0's connection dropped")
	assert.Equal(t, "open", probeTCP(t, 0, addr, "22"), "SSH still let in")
	assert.Equal(t, "refused", probeTCP(t, 2, addr, "7123"), "host 2 not blocked")
	require.NoError(t, undo())
	assert.Equal(t, "refused", probeTCP(t, 0, addr, "7123"), "rule removed")
}

// LimitHosts puts a token bucket on every host's eth0, and "" takes it off.
func TestLimitHosts(t *testing.T) {
	Need(t, fleet)
	require.NoError(t, fleet.LimitHosts("400mbit"))
	t.Cleanup(func() { _ = fleet.LimitHosts("") })
	for i := range fleet.Hosts {
		out, err := fleet.Exec(i, "tc", "qdisc", "show", "dev", "eth0")
		require.NoError(t, err)
		assert.Contains(t, string(out), "tbf", "host %d", i)
		assert.Contains(t, string(out), "rate 400Mbit", "host %d", i)
	}
	require.NoError(t, fleet.LimitHosts(""))
	out, err := fleet.Exec(0, "tc", "qdisc", "show", "dev", "eth0")
	require.NoError(t, err)
	assert.NotContains(t, string(out), "tbf")
}
