package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

// sshKeygen runs ssh-keygen, failing t with its output.
func sshKeygen(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ssh-keygen", args...).CombinedOutput()
	require.NoError(t, err, "ssh-keygen %q: %s", args, out)
}

// newKey makes an ed25519 key pair at dir/name (and .pub).
func newKey(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	sshKeygen(t, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p)
	return p
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(data)
}

// setSSHD reconfigures host i's sshd for the test and restores it after.
func setSSHD(t *testing.T, i int, extra string) {
	t.Helper()
	require.NoError(t, fleet.SetSSHD(i, extra))
	t.Cleanup(func() { assert.NoError(t, fleet.SetSSHD(i, "")) })
}

// collect is a DialOptions.Warn that keeps what it is told.
type collect struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collect) warn(m string) { c.mu.Lock(); c.msgs = append(c.msgs, m); c.mu.Unlock() }

// TestSSHCertificates: a host with an SSH host certificate (sshd
// HostCertificate, signed with ssh-keygen -s CA -h) is trusted through an
// @cert-authority line alone, as OpenSSH trusts it; @revoked refuses its
// key all the same; a user certificate beside the key (-cert.pub) or named
// by CertificateFile in ssh_config logs in where sshd trusts only the user
// CA (TrustedUserCAKeys, no authorized_keys).
func TestSSHCertificates(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	const i = 4
	h := fleet.Endpoints()[i]
	dir := t.TempDir()
	hostCA := newKey(t, dir, "host_ca")
	userCA := newKey(t, dir, "user_ca")
	// Sign a copy of the host's public key: the certificate lands beside it.
	hostPub := filepath.Join(dir, "host_key.pub")
	require.NoError(t, os.WriteFile(hostPub, []byte(readFile(t, fleet.HostKeyFile(i)+".pub")), 0o644))
	sshKeygen(t, "-q", "-s", hostCA, "-I", h.Name, "-h", "-n", h.Address, hostPub)
	setSSHD(t, i, fmt.Sprintf("HostCertificate %s\nTrustedUserCAKeys %s\nAuthorizedKeysFile none\n",
		filepath.Join(dir, "host_key-cert.pub"), userCA+".pub"))

	userKey := newKey(t, dir, "id_user")
	sshKeygen(t, "-q", "-s", userCA, "-I", "drover-test", "-n", fleet.User, userKey+".pub")
	knownHosts := filepath.Join(dir, "known_hosts")
	caLine := "@cert-authority 10.231.* " + readFile(t, hostCA+".pub")
	require.NoError(t, os.WriteFile(knownHosts, []byte(caLine), 0o600))
	h.KnownHosts, h.IdentityFile = knownHosts, userKey

	t.Run("host and user certificate", func(t *testing.T) {
		tr := dialHost(t, h, hermetic())
		assert.Equal(t, h.Name+"\n", output(t, tr, "hostname"))
	})
	t.Run("CertificateFile in ssh_config", func(t *testing.T) {
		cert := filepath.Join(dir, "elsewhere-cert.pub")
		require.NoError(t, os.Rename(userKey+"-cert.pub", cert))
		t.Cleanup(func() { _ = os.Rename(cert, userKey+"-cert.pub") })
		opts := hermetic()
		_, err := cluster.Dial(context.Background(), h, opts)
		var ae *cluster.AuthError
		require.ErrorAs(t, err, &ae, "the plain key alone is not authorized")

		opts.SSHConfigPath = filepath.Join(dir, "ssh_config")
		require.NoError(t, os.WriteFile(opts.SSHConfigPath, []byte("Host *\n    CertificateFile "+cert+"\n"), 0o600))
		tr := dialHost(t, h, opts)
		assert.Equal(t, h.Name+"\n", output(t, tr, "hostname"))
	})
	t.Run("revoked", func(t *testing.T) {
		require.NoError(t, os.WriteFile(knownHosts, []byte(caLine+"@revoked * "+readFile(t, hostPub)), 0o600))
		_, err := cluster.Dial(context.Background(), h, hermetic())
		var hke *cluster.HostKeyError
		require.ErrorAs(t, err, &hke)
		assert.Equal(t, knownHosts+":2", hke.Revoked)
		assert.False(t, cluster.IsUnreachable(err))
	})
}

// TestSSHKnownHostsBadLine: a known_hosts line drover cannot read (a typo,
// a key type it does not know) is skipped with one warning naming the file
// and line, and every host still connects, as with ssh.
func TestSSHKnownHostsBadLine(t *testing.T) {
	fleettest.Need(t, fleet)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(knownHosts, []byte("10.231.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBROKEN\n"+
		"10.231.0.2 sk-future-key@example.com AAAAAA==\n"+readFile(t, fleet.KnownHosts)), 0o600))
	hosts := fleet.Endpoints()
	for i := range hosts {
		hosts[i].KnownHosts = knownHosts
	}
	var w collect
	opts := hermetic()
	opts.Warn = w.warn
	ts, errs := cluster.DialAll(context.Background(), hosts, opts)
	for i := range hosts {
		if assert.NoError(t, errs[i]) {
			ts[i].Close()
		}
	}
	require.Len(t, w.msgs, 2, "one warning per line, not per host: %q", w.msgs)
	assert.Contains(t, w.msgs[0], knownHosts+":1: skipped a known_hosts line drover cannot read")
	assert.Contains(t, w.msgs[1], knownHosts+":2: ")
}

// TestSSHAcceptNewHashed: --accept-new-hosts records a new host's key with
// its name hashed when ssh_config says HashKnownHosts yes; OpenSSH finds
// the entry (ssh-keygen -F) and drover verifies the host by it.
func TestSSHAcceptNewHashed(t *testing.T) {
	fleettest.Need(t, fleet)
	noHome(t)
	dir := t.TempDir()
	knownHosts := filepath.Join(dir, "known_hosts")
	opts := hermetic()
	opts.SSHConfigPath = filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(opts.SSHConfigPath, []byte(fmt.Sprintf("Host *\n    HashKnownHosts yes\n    UserKnownHostsFile %s\n", knownHosts)), 0o600))
	h := fleet.Endpoints()[2]
	h.KnownHosts = ""
	opts.AcceptNewHosts = true
	dialHost(t, h, opts)
	data := readFile(t, knownHosts)
	assert.True(t, strings.HasPrefix(data, "|1|"), "hashed entry: %s", data)
	assert.NotContains(t, data, h.Address)
	out, err := exec.Command("ssh-keygen", "-F", h.Address, "-f", knownHosts).CombinedOutput()
	require.NoError(t, err, "OpenSSH does not find the entry: %s", out)

	opts.AcceptNewHosts = false
	dialHost(t, h, opts)
	assert.Equal(t, data, readFile(t, knownHosts), "known now: nothing more recorded")
}
