package cluster

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
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
	c, err := newHostKeyChecker(sshTarget{name: "h", knownHosts: []string{file}}, false, nil, nil)
	require.NoError(t, err)

	assert.Equal(t, []string{ssh.KeyAlgoED25519}, c.algorithms("ed.example:22"))
	assert.Equal(t, []string{ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}, c.algorithms("two.example:22"))
	assert.Nil(t, c.algorithms("unknown.example:22"))
}

// TestKnownHostsShared: dials sharing a KnownHosts parse each set of files
// once, and again whenever a file changes, so what they check a host key
// against is never older than the file: a key appended (AcceptNewHosts),
// an entry replaced by a same-size rewrite through rename (ssh-keygen -R
// and friends), a file that appears. The verdicts are those of a fresh
// parse.
func TestKnownHostsShared(t *testing.T) {
	keyOf := func() ssh.PublicKey {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		k, err := ssh.NewPublicKey(pub)
		require.NoError(t, err)
		return k
	}
	a1, a2, b := keyOf(), keyOf(), keyOf()
	dir := t.TempDir()
	file := filepath.Join(dir, "known_hosts")
	second := filepath.Join(dir, "known_hosts2") // absent at first
	write := func(lines ...string) {
		tmp := file + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
		require.NoError(t, os.Rename(tmp, file))
	}
	line := func(host string, k ssh.PublicKey) string { return knownhosts.Line([]string{host}, k) }
	write(line("a.example", a1))

	shared := &KnownHosts{}
	tgt := sshTarget{name: "h", knownHosts: []string{file, second}}
	check := func(host string, k ssh.PublicKey) error {
		t.Helper()
		c, err := newHostKeyChecker(tgt, false, shared, nil)
		require.NoError(t, err)
		fresh, err := newHostKeyChecker(tgt, false, nil, nil)
		require.NoError(t, err)
		addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 22}
		got, want := c.check(host+":22", addr, k), fresh.check(host+":22", addr, k)
		assert.Equal(t, want == nil, got == nil, "shared and fresh parse disagree on %s: %v vs %v", host, got, want)
		return got
	}

	for range 5 {
		require.NoError(t, check("a.example", a1))
	}
	assert.Equal(t, 1, shared.parses, "five dials, one parse")
	var herr *HostKeyError
	require.ErrorAs(t, check("a.example", a2), &herr, "a changed key is refused through the shared parse too")
	assert.NotEmpty(t, herr.Known)
	assert.Equal(t, 1, shared.parses)

	// Appended, as AcceptNewHosts records a key.
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(line("b.example", b) + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, check("b.example", b))
	assert.Equal(t, 2, shared.parses)

	// Rewritten to the same size (a2 for a1) with the old mtime: only the
	// inode tells.
	st, err := os.Stat(file)
	require.NoError(t, err)
	write(line("a.example", a2), line("b.example", b))
	require.NoError(t, os.Chtimes(file, st.ModTime(), st.ModTime()))
	st2, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, st.Size(), st2.Size())
	require.NoError(t, check("a.example", a2))
	require.Error(t, check("a.example", a1))
	assert.Equal(t, 3, shared.parses)

	// A file that appears.
	require.NoError(t, os.WriteFile(second, []byte(line("c.example", a1)+"\n"), 0o600))
	require.NoError(t, check("c.example", a1))
	assert.Equal(t, 4, shared.parses)
}

// BenchmarkHostKeyChecker: what one dial spends reading a known_hosts of
// 2,000 hashed entries (a well-travelled laptop's), parsing it itself
// (fresh) or through a KnownHosts shared with earlier dials (shared).
func BenchmarkHostKeyChecker(b *testing.B) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(b, err)
	k, err := ssh.NewPublicKey(pub)
	require.NoError(b, err)
	var lines []string
	for i := range 2000 {
		lines = append(lines, knownhosts.Line([]string{knownhosts.HashHostname(fmt.Sprintf("10.0.%d.%d", i/250, i%250))}, k))
	}
	file := filepath.Join(b.TempDir(), "known_hosts")
	require.NoError(b, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	tgt := sshTarget{name: "h", knownHosts: []string{file}}
	for _, bc := range []struct {
		name   string
		shared *KnownHosts
	}{{"fresh", nil}, {"shared", &KnownHosts{}}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := newHostKeyChecker(tgt, false, bc.shared, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnknownHosts: two or more unknown host keys are said as one error
// that lists every host on a line of its own and one ssh-keyscan line for
// them all (hosts grouped by port and known_hosts file); one unknown host,
// or a changed or revoked key, is said by its own error.
func TestUnknownHosts(t *testing.T) {
	kh := "/h/.ssh/known_hosts"
	unknown := func(name, addr string) error {
		return fmt.Errorf("connect to %s (%s): %w", name, addr,
			&HostKeyError{Host: name, Addr: addr, KeyType: "ssh-ed25519", Fingerprint: "SHA256:" + name, Files: []string{kh}})
	}
	changed := fmt.Errorf("connect to c (10.0.0.9:22): %w", &HostKeyError{Host: "c", Addr: "10.0.0.9:22", Known: []string{"x"}, Files: []string{kh}})
	revoked := &HostKeyError{Host: "r", Addr: "10.0.0.8:22", Revoked: kh + ":3", Files: []string{kh}}
	for _, tt := range []struct {
		name string
		errs []error
		want string // "" for nil
	}{
		{"none", []error{nil, nil}, ""},
		{"one of three", []error{nil, unknown("a", "10.0.0.1:22"), &UnreachableError{Err: fmt.Errorf("refused")}}, ""},
		{"changed and revoked are not unknown", []error{changed, revoked, unknown("a", "10.0.0.1:22")}, ""},
		{"three on port 22", []error{unknown("a", "10.0.0.1:22"), unknown("b", "10.0.0.2:22"), nil, unknown("c", "10.0.0.3:22")},
			"host keys of 3 hosts unknown, not in " + kh + " (run with --accept-new-hosts, or add them all with `ssh-keyscan 10.0.0.1 10.0.0.2 10.0.0.3 >> " + kh + "`):\n" +
				"a (10.0.0.1:22): presented ssh-ed25519 key SHA256:a\n" +
				"b (10.0.0.2:22): presented ssh-ed25519 key SHA256:b\n" +
				"c (10.0.0.3:22): presented ssh-ed25519 key SHA256:c"},
		{"two ports", []error{unknown("a", "10.0.0.1:2222"), unknown("b", "[fd00::2]:22"), unknown("c", "10.0.0.3:2222")},
			"host keys of 3 hosts unknown, not in " + kh + " (run with --accept-new-hosts, or add them all with `ssh-keyscan -p 2222 10.0.0.1 10.0.0.3 >> " + kh + "; ssh-keyscan fd00::2 >> " + kh + "`):\n" +
				"a (10.0.0.1:2222): presented ssh-ed25519 key SHA256:a\n" +
				"b ([fd00::2]:22): presented ssh-ed25519 key SHA256:b\n" +
				"c (10.0.0.3:2222): presented ssh-ed25519 key SHA256:c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := UnknownHosts(tt.errs)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			var hke *HostKeyError
			assert.ErrorAs(t, err, &hke, "callers still find the host key error")
			assert.True(t, IsUnknownHostKey(err))
			assert.False(t, IsUnreachable(err))
		})
	}
}
