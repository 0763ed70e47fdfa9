package cluster

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// TestHostKeyAlgorithms: a host is asked only for the key types
// known_hosts has for it (RSA as its SHA-2 signatures first), and an
// unknown host for the library's defaults.
func TestHostKeyAlgorithms(t *testing.T) {
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	line := func(host string, pub any) string {
		k, err := ssh.NewPublicKey(pub)
		require.NoError(t, err)
		return knownhosts.Line([]string{host}, k)
	}
	file := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		line("ed.example", edPub),
		line("two.example", &ec.PublicKey),
		line("two.example", &rsaKey.PublicKey),
	}, "\n")+"\n"), 0o600))
	c, err := newHostKeyChecker(sshTarget{name: "h", knownHosts: []string{file}}, false)
	require.NoError(t, err)

	assert.Equal(t, []string{ssh.KeyAlgoED25519}, c.algorithms("ed.example:22"))
	assert.Equal(t, []string{ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}, c.algorithms("two.example:22"))
	assert.Nil(t, c.algorithms("unknown.example:22"))
}
