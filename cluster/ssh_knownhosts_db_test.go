package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func newTestKey(t *testing.T) (ssh.PublicKey, ssh.Signer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	k, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	s, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	return k, s
}

func TestMatchHostPatterns(t *testing.T) {
	hashed := knownhosts.HashHostname("[10.0.0.5]:2222")
	for _, tc := range []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"a.example"}, "a.example", true},
		{[]string{"A.Example"}, "a.example", true},
		{[]string{"a.example"}, "[a.example]:2222", false},
		{[]string{"[a.example]:2222"}, "[a.example]:2222", true},
		{[]string{"*.example"}, "b.example", true},
		{[]string{"*.example", "!bad.example"}, "bad.example", false},
		{[]string{"10.0.0.?"}, "10.0.0.7", true},
		{[]string{"10.0.0.?"}, "10.0.0.17", false},
		{[]string{"[10.0.0.*]:*"}, "[10.0.0.5]:2222", true},
		{[]string{hashed}, "[10.0.0.5]:2222", true},
		{[]string{hashed}, "10.0.0.5", false},
		{[]string{"|1|garbage"}, "10.0.0.5", false},
	} {
		assert.Equal(t, tc.want, matchHostPatterns(tc.patterns, tc.name), "%q vs %s", tc.patterns, tc.name)
	}
}

// TestKnownHostsBadLines: lines drover cannot read (a typo, a key type it
// does not know, an unknown marker) are skipped with one warning each,
// naming file and line, however many dials read the file; the good lines
// around them still verify their hosts. x/crypto's knownhosts.New refused
// the whole file ("short read"), blocking every host.
func TestKnownHostsBadLines(t *testing.T) {
	good, _ := newTestKey(t)
	other, _ := newTestKey(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		"# a comment",
		"typo.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBROKEN",
		knownhosts.Line([]string{"good.example"}, good),
		"new.example ssh-future-key AAAAB3NzaC1yc2EAAAADAQABAAABAQ==",
		"@bogus-marker x.example " + strings.TrimPrefix(knownhosts.Line([]string{"x"}, good), "x "),
		"",
		knownhosts.Line([]string{"other.example"}, other),
	}, "\n")+"\n"), 0o600))
	var warnings []string
	warn := func(m string) { warnings = append(warnings, m) }
	shared := &KnownHosts{}
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 22}
	for range 3 {
		c, err := newHostKeyChecker(sshTarget{name: "h", knownHosts: []string{file}}, false, shared, warn)
		require.NoError(t, err)
		assert.NoError(t, c.check("good.example:22", addr, good))
		assert.NoError(t, c.check("other.example:22", addr, other))
		var herr *HostKeyError
		require.ErrorAs(t, c.check("good.example:22", addr, other), &herr)
		assert.Equal(t, []string{"ssh-ed25519 " + ssh.FingerprintSHA256(good) + " (" + file + ":3)"}, herr.Known)
	}
	require.Len(t, warnings, 3, "one warning per bad line, not per dial: %q", warnings)
	for i, n := range []string{":2: ", ":4: ", ":5: "} {
		assert.Contains(t, warnings[i], file+n+"skipped a known_hosts line drover cannot read")
	}
}

// TestKnownHostsCertAuthority: with an @cert-authority line for the host,
// certificate algorithms are asked for first; a certificate the CA signed
// for the host's name is accepted, one for another name or by another CA
// is not, and @revoked refuses a key even when its certificate is good.
func TestKnownHostsCertAuthority(t *testing.T) {
	caPub, caSigner := newTestKey(t)
	_, otherCA := newTestKey(t)
	hostPub, _ := newTestKey(t)
	revokedPub, _ := newTestKey(t)
	caLine := "@cert-authority *.example " + strings.TrimPrefix(knownhosts.Line([]string{"x"}, caPub), "x ")
	revLine := "@revoked * " + strings.TrimPrefix(knownhosts.Line([]string{"x"}, revokedPub), "x ")
	file := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(file, []byte(caLine+"\n"+revLine+"\n"), 0o600))
	c, err := newHostKeyChecker(sshTarget{name: "h", knownHosts: []string{file}}, false, nil, nil)
	require.NoError(t, err)

	algos := c.algorithms("a.example:22")
	require.NotEmpty(t, algos)
	assert.Contains(t, algos[0], "-cert-v01@openssh.com", "certificates first")
	assert.Contains(t, algos, ssh.KeyAlgoED25519, "plain keys after them, for a host without a certificate")
	assert.Nil(t, c.algorithms("a.elsewhere:22"), "no CA, no known key: library defaults")

	sign := func(key ssh.PublicKey, by ssh.Signer, principals ...string) *ssh.Certificate {
		cert := &ssh.Certificate{Key: key, CertType: ssh.HostCert, ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
		require.NoError(t, cert.SignCert(rand.Reader, by))
		return cert
	}
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 22}
	assert.NoError(t, c.check("a.example:22", addr, sign(hostPub, caSigner, "a.example")))
	var herr *HostKeyError
	require.ErrorAs(t, c.check("a.example:22", addr, sign(hostPub, caSigner, "b.example")), &herr)
	assert.Contains(t, herr.CertProblem, "principal")
	require.ErrorAs(t, c.check("a.example:22", addr, sign(hostPub, otherCA, "a.example")), &herr, "another CA: checked as the plain key, unknown")
	assert.Empty(t, herr.Known)
	require.ErrorAs(t, c.check("a.example:22", addr, sign(revokedPub, caSigner, "a.example")), &herr)
	assert.Equal(t, file+":2", herr.Revoked)
	assert.Contains(t, herr.Error(), "REVOKED")
}

// TestKnownHostsRecordHashed: AcceptNewHosts writes the new host's name
// hashed when the ssh config says HashKnownHosts yes, and that line then
// verifies the host.
func TestKnownHostsRecordHashed(t *testing.T) {
	key, _ := newTestKey(t)
	file := filepath.Join(t.TempDir(), "known_hosts")
	tgt := sshTarget{name: "h", knownHosts: []string{file}, hashKnownHosts: true}
	c, err := newHostKeyChecker(tgt, true, nil, nil)
	require.NoError(t, err)
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 2222}
	require.NoError(t, c.check("10.0.0.1:2222", addr, key))
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "|1|"), "hashed: %s", data)
	assert.NotContains(t, string(data), "10.0.0.1")
	c, err = newHostKeyChecker(sshTarget{name: "h", knownHosts: []string{file}}, false, nil, nil)
	require.NoError(t, err)
	assert.NoError(t, c.check("10.0.0.1:2222", addr, key))
}
