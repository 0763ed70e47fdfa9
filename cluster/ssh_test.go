package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

var fleet *fleettest.Fleet

func TestMain(m *testing.M) {
	os.Exit(fleettest.Main(m, fleettest.Options{Name: "cl", N: 8, Subnet: 11}, &fleet))
}

// hermetic are dial options that ignore the invoking user's ~/.ssh/config
// and ssh-agent, so tests see only what they set up.
func hermetic() cluster.DialOptions {
	return cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"}
}

func dialHost(t *testing.T, h cluster.Endpoint, opts cluster.DialOptions) cluster.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := cluster.Dial(ctx, h, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// output runs args on tr and returns its stdout, failing t on any error.
func output(t *testing.T, tr cluster.Transport, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	p, err := tr.Start(ctx, cluster.Cmd{Args: args, Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err)
	require.NoError(t, p.Wait(), "%q on %s: stderr %s", args, tr.Host().Name, stderr.String())
	return stdout.String()
}

// hostKey reads host i's key from the fleet's known_hosts.
func hostKey(t *testing.T, i int) ssh.PublicKey {
	t.Helper()
	addr := fleet.Endpoints()[i].Address
	data, err := os.ReadFile(fleet.KnownHosts)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == addr {
			key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(fields[1] + " " + fields[2]))
			require.NoError(t, err)
			return key
		}
	}
	t.Fatalf("no key for %s in %s", addr, fleet.KnownHosts)
	return nil
}

func TestSSHConformance(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleet.Endpoints()[0]
	transporttest.Run(t, func(t *testing.T) cluster.Transport { return dialHost(t, h, hermetic()) })
}

func TestSSHDialAll(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleet.Endpoints()
	// One host that refuses connections: the others must not suffer.
	bad := hosts[0]
	bad.Name, bad.Port = "refuser", 2222
	hosts = append(hosts, bad)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := hermetic()
	opts.KnownHosts = &cluster.KnownHosts{}
	ts, errs := cluster.DialAll(ctx, hosts, opts)
	// Every dial checked its host key against one parse of known_hosts.
	assert.Equal(t, 1, opts.KnownHosts.Parses())
	require.Len(t, ts, len(hosts))
	require.Len(t, errs, len(hosts))
	for i, h := range hosts[:len(hosts)-1] {
		require.NoError(t, errs[i], h.Name)
		defer ts[i].Close()
		assert.Equal(t, h.Name, ts[i].Host().Name)
		// hostname inside the host's namespaces is its fleet name.
		assert.Equal(t, h.Name+"\n", output(t, ts[i], "hostname"))
	}
	last := len(hosts) - 1
	assert.Nil(t, ts[last])
	require.Error(t, errs[last])
	assert.Contains(t, errs[last].Error(), fmt.Sprintf("connect to refuser (%s:2222): connection refused", bad.Address))
	assert.True(t, cluster.IsUnreachable(errs[last]), "a refused connection is an unreachable host: %v", errs[last])
}

func TestSSHConnectTimeout(t *testing.T) {
	fleettest.Need(t, fleet)
	require.NoError(t, fleet.Cut(7))
	t.Cleanup(func() { _ = fleet.Heal(7) })
	opts := hermetic()
	opts.ConnectTimeout = time.Second
	start := time.Now()
	_, err := cluster.Dial(context.Background(), fleet.Endpoints()[7], opts)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second, "a 1s connect timeout took %v", time.Since(start))
	assert.Contains(t, err.Error(), "connect to "+fleet.Hosts[7].Name+" ("+fleet.Hosts[7].Addr+":22): timed out after 1s")
	var ue *cluster.UnreachableError
	assert.ErrorAs(t, err, &ue)
}

func TestSSHUnknownHostRefused(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleet.Endpoints()[1]
	h.KnownHosts = filepath.Join(t.TempDir(), "known_hosts") // missing: nothing known
	_, err := cluster.Dial(context.Background(), h, hermetic())
	require.Error(t, err)
	var hke *cluster.HostKeyError
	require.ErrorAs(t, err, &hke)
	assert.Empty(t, hke.Known)
	assert.False(t, cluster.IsUnreachable(err), "a refused host key is not worth waiting for")
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{"connect to " + fleet.Hosts[1].Name + " (" + fleet.Hosts[1].Addr + ":22)", "host key unknown", ssh.FingerprintSHA256(hostKey(t, 1)), "--accept-new-hosts", "ssh-keyscan " + fleet.Hosts[1].Addr} {
		assert.Contains(t, msg, want)
	}
	_, statErr := os.Stat(h.KnownHosts)
	assert.ErrorIs(t, statErr, os.ErrNotExist, "a refused host must not be recorded")
}

func TestSSHAcceptNewHosts(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleet.Endpoints()[2]
	h.KnownHosts = filepath.Join(t.TempDir(), "sub", "known_hosts")
	opts := hermetic()
	opts.AcceptNewHosts = true
	tr := dialHost(t, h, opts)
	assert.Equal(t, "ok\n", output(t, tr, "echo", "ok"))

	data, err := os.ReadFile(h.KnownHosts)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%s %s", h.Address, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey(t, 2))))), strings.TrimSpace(string(data)))

	// Recorded: a strict dial now succeeds, and nothing is appended twice.
	tr2 := dialHost(t, h, hermetic())
	assert.Equal(t, "ok\n", output(t, tr2, "echo", "ok"))
	again, err := os.ReadFile(h.KnownHosts)
	require.NoError(t, err)
	assert.Equal(t, string(data), string(again))
}

func TestSSHChangedHostKeyRefused(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleet.Endpoints()[3]
	// Host 4's key stands in for a wrong key at host 3's address.
	wrong := hostKey(t, 4)
	h.KnownHosts = filepath.Join(t.TempDir(), "known_hosts")
	content := "# a comment\n" + h.Address + " " + string(ssh.MarshalAuthorizedKey(wrong))
	require.NoError(t, os.WriteFile(h.KnownHosts, []byte(content), 0o600))
	for _, accept := range []bool{false, true} {
		opts := hermetic()
		opts.AcceptNewHosts = accept // never overrides a changed key
		_, err := cluster.Dial(context.Background(), h, opts)
		require.Error(t, err)
		msg := err.Error()
		t.Log(msg)
		for _, want := range []string{
			"connect to " + fleet.Hosts[3].Name + " (" + fleet.Hosts[3].Addr + ":22)",
			"HOST KEY CHANGED",
			ssh.FingerprintSHA256(hostKey(t, 3)),
			ssh.FingerprintSHA256(wrong),
			h.KnownHosts + ":2",
		} {
			assert.Contains(t, msg, want, "accept-new=%v", accept)
		}
		after, err := os.ReadFile(h.KnownHosts)
		require.NoError(t, err)
		assert.Equal(t, content, string(after), "known_hosts must not change")
	}
}

func TestSSHHashedKnownHosts(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleet.Endpoints()[4]
	h.KnownHosts = filepath.Join(t.TempDir(), "known_hosts")
	line := fmt.Sprintf("%s %s", hashHostname(h.Address), ssh.MarshalAuthorizedKey(hostKey(t, 4)))
	require.NoError(t, os.WriteFile(h.KnownHosts, []byte(line), 0o600))
	tr := dialHost(t, h, hermetic())
	assert.Equal(t, "ok\n", output(t, tr, "echo", "ok"))
}

func hashHostname(host string) string {
	out, err := exec.Command("sh", "-c", `f=$(mktemp) && echo "$1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl" >"$f" && ssh-keygen -H -f "$f" >/dev/null 2>&1 && cut -d' ' -f1 "$f"; rm -f "$f" "$f.old"`, "sh", host).Output()
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(out))
}

// noHome points HOME at an empty directory so that no default identity
// file (~/.ssh/id_*) or known_hosts can make a test pass by accident.
func noHome(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
}

func TestSSHAgentAuth(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	require.NoError(t, agent.Start())
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	testenv.Wait(t, 10*time.Second, "ssh-agent's socket", func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	})
	add := exec.Command("ssh-add", fleet.KeyFile)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	out, err := add.CombinedOutput()
	require.NoError(t, err, "ssh-add: %s", out)

	h := fleet.Endpoints()[5]
	h.IdentityFile = ""
	opts := hermetic()
	opts.AgentSocket = sock
	tr := dialHost(t, h, opts)
	assert.Equal(t, "drovertest\n", output(t, tr, "whoami"))

	// $SSH_AUTH_SOCK is the default.
	t.Setenv("SSH_AUTH_SOCK", sock)
	opts.AgentSocket = ""
	tr = dialHost(t, h, opts)
	assert.Equal(t, "drovertest\n", output(t, tr, "whoami"))
}

func TestSSHAuthFailureNamesKeys(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	wrongKey := filepath.Join(t.TempDir(), "id_wrong")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", wrongKey).CombinedOutput()
	require.NoError(t, err, "%s", out)
	h := fleet.Endpoints()[5]

	h.IdentityFile = wrongKey
	_, err = cluster.Dial(context.Background(), h, hermetic())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connect to "+fleet.Hosts[5].Name+" ("+fleet.Hosts[5].Addr+`:22): auth failed for user "drovertest": tried `+wrongKey)
	var ae *cluster.AuthError
	require.ErrorAs(t, err, &ae, "the type callers branch on")
	assert.Equal(t, []string{wrongKey}, ae.Tried)
	assert.False(t, cluster.IsUnreachable(err), "a refused key is not worth waiting for")

	t.Log(err)
	h.IdentityFile = ""
	_, err = cluster.Dial(context.Background(), h, hermetic())
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "auth failed")
	assert.Contains(t, err.Error(), "no usable key")
	require.ErrorAs(t, err, &ae, "no key to offer is an authentication failure too")
}

func TestSSHProxyJump(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleet.Endpoints()
	for _, tc := range []struct{ name, jump string }{
		{"inventory name", fleet.Hosts[0].Name},
		{"user@host:port", "drovertest@" + hosts[0].Address + ":22"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hosts[1]
			h.ProxyJump = tc.jump
			opts := hermetic()
			opts.Inventory = hosts
			tr := dialHost(t, h, opts)
			// The TCP connection to host 1 comes from host 0.
			sshClient := output(t, tr, "sh", "-c", `echo "$SSH_CLIENT"`)
			assert.Equal(t, hosts[0].Address, strings.Fields(sshClient)[0])
			assert.Equal(t, fleet.Hosts[1].Name+"\n", output(t, tr, "hostname"))
			fsys, err := tr.FS(context.Background())
			require.NoError(t, err)
			_, err = fsys.Stat(".")
			require.NoError(t, err)
		})
	}

	t.Run("jump host key verified", func(t *testing.T) {
		h := hosts[1]
		h.ProxyJump = fleet.Hosts[0].Name
		jump := hosts[0]
		jump.KnownHosts = filepath.Join(t.TempDir(), "known_hosts")
		opts := hermetic()
		opts.Inventory = []cluster.Endpoint{jump}
		_, err := cluster.Dial(context.Background(), h, opts)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "connect to "+fleet.Hosts[1].Name+" ("+fleet.Hosts[1].Addr+":22): via proxy jump "+fleet.Hosts[0].Name+": connect to "+fleet.Hosts[0].Name+" ("+fleet.Hosts[0].Addr+":22): host key unknown")
	})
}

func TestSSHConfigFile(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	hosts := fleet.Endpoints()
	dir := t.TempDir()
	sshConfig := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(sshConfig, []byte(fmt.Sprintf(`
Host other
    User nobody

Host fleetalias
    HostName %s
    User %s
    Port 22
    IdentityFile %s
    UserKnownHostsFile %s

Host *
    User wronguser
`, hosts[6].Address, fleet.User, fleet.KeyFile, fleet.KnownHosts)), 0o600))
	opts := hermetic()
	opts.SSHConfigPath = sshConfig
	// Only the alias: everything else comes from the config.
	h := cluster.Endpoint{Name: "aliased", Address: "fleetalias", Transport: cluster.TransportSSH}
	tr := dialHost(t, h, opts)
	assert.Equal(t, fleet.Hosts[6].Name+"\n", output(t, tr, "hostname"))
	assert.Equal(t, "drovertest\n", output(t, tr, "whoami"))

	// The inventory wins over the config.
	h.User = "nosuchuser"
	_, err := cluster.Dial(context.Background(), h, opts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `auth failed for user "nosuchuser"`)
}

func TestSSHConnectionLost(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleet.Endpoints()
	victim := dialHost(t, hosts[2], hermetic())
	healthy := dialHost(t, hosts[3], hermetic())

	ctx := context.Background()
	var vOut, hOut bytes.Buffer
	var mu sync.Mutex
	pv, err := victim.Start(ctx, cluster.Cmd{Args: []string{"sh", "-c", "echo started; sleep 60"}, Stdout: lockedWriter{&mu, &vOut}})
	require.NoError(t, err)
	ph, err := healthy.Start(ctx, cluster.Cmd{Args: []string{"sh", "-c", "sleep 4; echo done"}, Stdout: &hOut})
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "the victim's first line", func() bool { mu.Lock(); defer mu.Unlock(); return vOut.Len() > 0 })

	require.NoError(t, fleet.Cut(2))
	t.Cleanup(func() { _ = fleet.Heal(2) })
	cut := time.Now()

	done := make(chan error, 1)
	go func() { done <- pv.Wait() }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorIs(t, err, cluster.ErrConnectionLost)
		assert.True(t, cluster.IsConnectionLost(err))
		var ee *cluster.ExitError
		assert.False(t, errors.As(err, &ee), "a lost connection is not an exit status")
		assert.Contains(t, err.Error(), fleet.Hosts[2].Name)
		t.Logf("noticed after %v: %v", time.Since(cut), err)
	case <-time.After(15 * time.Second):
		t.Fatal("a cut host was not reported within 15s")
	}
	require.NoError(t, ph.Wait(), "the healthy host's command must finish normally")
	assert.Equal(t, "done\n", hOut.String())

	// The dead transport refuses new commands with the same error.
	_, err = victim.Start(ctx, cluster.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, cluster.ErrConnectionLost)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestSSHCloseEndsCommands(t *testing.T) {
	fleettest.Need(t, fleet)
	tr, err := cluster.Dial(context.Background(), fleet.Endpoints()[4], hermetic())
	require.NoError(t, err)
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: []string{"sleep", "60"}})
	require.NoError(t, err)
	testenv.WaitFor(t, 10*time.Second, "sleep 60 to run on the host", func() bool {
		pids, err := fleet.Pids(4)
		require.NoError(t, err)
		for _, pid := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && string(b) == "sleep\x0060\x00" {
				return true
			}
		}
		return false
	})
	require.NoError(t, tr.Close())
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, cluster.ErrConnectionLost)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
}

// TestSSHMoreCommandsThanMaxSessions starts more commands at once than the
// fleet's sshd allows sessions per connection (MaxSessions 100): the extra
// ones wait for a free slot instead of failing.
func TestSSHMoreCommandsThanMaxSessions(t *testing.T) {
	fleettest.Need(t, fleet)
	tr := dialHost(t, fleet.Endpoints()[6], hermetic())
	const n = 130
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	procs := make([]cluster.Process, n)
	var wg sync.WaitGroup
	startErrs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], startErrs[i] = tr.Start(ctx, cluster.Cmd{Args: []string{"sleep", "2"}})
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, startErrs[i], "start %d", i)
		assert.NoError(t, procs[i].Wait(), "command %d", i)
	}
}

// Ping (what `drover run` asks of a connection it kept from the previous
// attempt) answers for a live connection; one whose host stopped
// answering fails within the context's deadline, is closed, and says the
// connection was lost; so does a closed one.
func TestSSHPing(t *testing.T) {
	fleettest.Need(t, fleet)
	opts := hermetic()
	opts.KeepAliveInterval = -1 // no keepalive answer to vouch for it: Ping must ask
	tr := dialHost(t, fleet.Endpoints()[6], opts)
	require.NoError(t, cluster.Ping(context.Background(), tr))

	require.NoError(t, fleet.Cut(6))
	t.Cleanup(func() { _ = fleet.Heal(6) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := cluster.Ping(ctx, tr)
	assert.True(t, cluster.IsConnectionLost(err), "%v", err)
	_, err = tr.Start(context.Background(), cluster.Cmd{Args: []string{"true"}})
	assert.True(t, cluster.IsConnectionLost(err), "the unanswered connection is closed: %v", err)

	other := dialHost(t, fleet.Endpoints()[5], hermetic())
	require.NoError(t, other.Close())
	assert.True(t, cluster.IsConnectionLost(cluster.Ping(context.Background(), other)))
}
