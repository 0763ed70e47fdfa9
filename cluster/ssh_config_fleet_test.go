package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// TestSSHConfigMatchExec: an ssh_config with Match exec and Match final
// blocks (a VPN check, Fedora's default include), which the config parser
// refuses, connects: with OpenSSH's client installed drover asks it (ssh
// -G) and gets the user, key and known_hosts that only the Match exec
// block sets; without one, the blocks are ignored with a warning each and
// the Host block still applies.
func TestSSHConfigMatchExec(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	h := fleet.Endpoints()[6]
	cfgFile := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
Match exec "test -n on-the-vpn"
    User %s
    IdentityFile %s
    UserKnownHostsFile %s
Host fleetalias
    HostName %s
Match final all
    ServerAliveInterval 30
`, fleet.User, fleet.KeyFile, fleet.KnownHosts, h.Address)), 0o600))
	alias := cluster.Endpoint{Name: "aliased", Address: "fleetalias", Transport: cluster.TransportSSH}

	t.Run("ssh -G", func(t *testing.T) {
		opts := hermetic()
		opts.SSHConfigPath = cfgFile
		tr := dialHost(t, alias, opts)
		assert.Equal(t, fleet.Hosts[6].Name+"\n", output(t, tr, "hostname"))
		assert.Equal(t, fleet.User+"\n", output(t, tr, "whoami"))
	})
	t.Run("no OpenSSH client", func(t *testing.T) {
		var w collect
		opts := hermetic()
		opts.SSHConfigPath, opts.OpenSSH, opts.Warn = cfgFile, "none", w.warn
		alias := alias
		alias.User, alias.IdentityFile, alias.KnownHosts = fleet.User, fleet.KeyFile, fleet.KnownHosts
		hosts := []cluster.Endpoint{alias, alias, alias}
		ts, errs := cluster.DialAll(context.Background(), hosts, opts)
		for i := range hosts {
			if assert.NoError(t, errs[i]) {
				assert.Equal(t, fleet.Hosts[6].Name+"\n", output(t, ts[i], "hostname"))
				ts[i].Close()
			}
		}
		require.Len(t, w.msgs, 2, "one warning per block, not per host: %q", w.msgs)
		assert.Contains(t, w.msgs[0], cfgFile+":2: ignoring the block `Match exec \"test -n on-the-vpn\"`")
		assert.Contains(t, w.msgs[1], cfgFile+":8: ignoring the block `Match final all`")
	})
}

// TestSSHProxyCommand: a host reached through an ssh_config ProxyCommand
// (here OpenSSH's own `ssh -W` through another fleet host, the classic
// bastion setup) is connected through it, and the command is gone once the
// transport is closed.
func TestSSHProxyCommand(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	hosts := fleet.Endpoints()
	bastion, target := hosts[0], hosts[3]
	dir := t.TempDir()
	// A copy of the key under this test's own name, to find the proxy
	// command among the machine's processes.
	key := filepath.Join(dir, "id_proxytest")
	require.NoError(t, os.WriteFile(key, []byte(readFile(t, fleet.KeyFile)), 0o600))
	cfgFile := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
Host behind
    HostName %s
    User %s
    IdentityFile %s
    UserKnownHostsFile %s
    ProxyCommand ssh -F /dev/null -i %s -o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes -W %%h:%%p %s@%s
`, target.Address, fleet.User, key, fleet.KnownHosts, key, fleet.KnownHosts, fleet.User, bastion.Address)), 0o600))
	opts := hermetic()
	opts.SSHConfigPath = cfgFile
	tr, err := cluster.Dial(context.Background(), cluster.Endpoint{Name: "behind", Address: "behind", Transport: cluster.TransportSSH}, opts)
	require.NoError(t, err)
	assert.Equal(t, fleet.Hosts[3].Name+"\n", output(t, tr, "hostname"))
	// sshd on the target saw the connection come from the bastion.
	conn := output(t, tr, "sh", "-c", "echo $SSH_CONNECTION")
	assert.True(t, strings.HasPrefix(conn, bastion.Address+" "), "SSH_CONNECTION %q: not through %s", conn, bastion.Address)

	proxies := func() string {
		out, _ := exec.Command("pgrep", "-f", "-a", "id_proxytest").Output()
		return strings.TrimSpace(string(out))
	}
	require.NotEmpty(t, proxies(), "the proxy command runs while connected")
	require.NoError(t, tr.Close())
	testenv.Wait(t, 10*time.Second, "the proxy command to end", func() (bool, string) {
		left := proxies()
		return left == "", "left running: " + left
	})

	// A proxy command that fails says why, and the host counts as unreachable.
	require.NoError(t, os.WriteFile(cfgFile, []byte("Host behind\n    User x\n    ProxyCommand sh -c 'echo no route to bastion >&2; exit 1'\n"), 0o600))
	_, err = cluster.Dial(context.Background(), cluster.Endpoint{Name: "behind", Address: "behind", Transport: cluster.TransportSSH, KnownHosts: fleet.KnownHosts}, opts)
	require.Error(t, err)
	assert.True(t, cluster.IsUnreachable(err), "%v", err)
	assert.Contains(t, err.Error(), "no route to bastion")
}
