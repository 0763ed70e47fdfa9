package cluster

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError is a refused host key: unknown (and AcceptNewHosts off), or
// different from the one recorded, which may be a man-in-the-middle. It
// carries what a user needs to decide: the presented key's fingerprint and
// where the known ones are written.
type HostKeyError struct {
	Host        string // inventory name
	Addr        string // host:port as looked up
	Fingerprint string // SHA256 fingerprint of the presented key
	KeyType     string
	// Known is empty for an unknown host; for a changed key it lists each
	// recorded key as "SHA256:... (FILE:LINE)".
	Known []string
	Files []string // the known_hosts files consulted
}

// Error does not repeat the host: Dial wraps it as "connect to NAME (ADDR): ...".
func (e *HostKeyError) Error() string {
	host, port, _ := net.SplitHostPort(e.Addr)
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	if len(e.Known) == 0 {
		scan := "ssh-keyscan " + host
		if port != "22" {
			scan = "ssh-keyscan -p " + port + " " + host
		}
		return fmt.Sprintf("host key unknown: presented %s key %s, which is not in %s (run with --accept-new-hosts, or add it with `%s >> %s`)",
			e.KeyType, e.Fingerprint, strings.Join(e.Files, ", "), scan, file)
	}
	return fmt.Sprintf("HOST KEY CHANGED: presented %s key %s, but known_hosts has %s; someone may be intercepting the connection, or the host was reinstalled (then remove the old entry with `ssh-keygen -R %s -f %s`)",
		e.KeyType, e.Fingerprint, strings.Join(e.Known, ", "), knownhosts.Normalize(e.Addr), file)
}

// hostKeyChecker verifies host keys against the target's known_hosts files
// with knownhosts (plain and hashed entries), optionally recording new ones.
type hostKeyChecker struct {
	name      string
	files     []string // all consulted
	existing  []string // those that exist (knownhosts.New fails on missing files)
	acceptNew bool
	cb        ssh.HostKeyCallback
}

func newHostKeyChecker(t sshTarget, acceptNew bool) (*hostKeyChecker, error) {
	c := &hostKeyChecker{name: t.name, files: t.knownHosts, acceptNew: acceptNew}
	for _, f := range t.knownHosts {
		if _, err := os.Stat(f); err == nil {
			c.existing = append(c.existing, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
	}
	cb, err := knownhosts.New(c.existing...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	c.cb = cb
	return c, nil
}

// algorithms returns the host key algorithms to negotiate with addr: those
// of the keys known for it, so that a host known by its ed25519 key is not
// asked for an RSA key it would then fail to match (what OpenSSH does too).
// Nil (library default) for an unknown host.
func (c *hostKeyChecker) algorithms(addr string) []string {
	// A key nobody has (all zeros; no key pair is generated, which cost
	// more than the rest of this) matches nothing, so the callback lists
	// all known keys.
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := c.cb(addr, fakeAddr(addr), probe); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		for _, a := range algorithmsForKeyType(k.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

func algorithmsForKeyType(t string) []string {
	switch t {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	case ssh.CertAlgoRSAv01:
		return []string{ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01}
	default:
		return []string{t}
	}
}

// fakeAddr is the net.Addr knownhosts wants alongside the host name; with
// the same host it adds nothing, which is the point for the probe.
func fakeAddr(hostport string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil || a.IP == nil {
		return &net.TCPAddr{IP: net.IPv4zero}
	}
	return a
}

// check is the ssh.HostKeyCallback.
func (c *hostKeyChecker) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := c.cb(hostname, remote, key)
	if err == nil {
		return nil
	}
	var revoked *knownhosts.RevokedError
	if errors.As(err, &revoked) {
		return fmt.Errorf("host key of %s (%s) is revoked in %s:%d", c.name, hostname, revoked.Revoked.Filename, revoked.Revoked.Line)
	}
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return err
	}
	herr := &HostKeyError{
		Host:        c.name,
		Addr:        hostname,
		Fingerprint: ssh.FingerprintSHA256(key),
		KeyType:     key.Type(),
		Files:       c.files,
	}
	for _, w := range ke.Want {
		herr.Known = append(herr.Known, fmt.Sprintf("%s %s (%s:%d)", w.Key.Type(), ssh.FingerprintSHA256(w.Key), w.Filename, w.Line))
	}
	if len(ke.Want) > 0 || !c.acceptNew {
		return herr
	}
	return c.record(hostname, key)
}

// record appends key for hostname to the first known_hosts file, creating
// it (and its directory) if need be. One O_APPEND write per line keeps
// concurrent dials from interleaving entries.
func (c *hostKeyChecker) record(hostname string, key ssh.PublicKey) error {
	if len(c.files) == 0 {
		return fmt.Errorf("accept new host key of %s: no known_hosts file to record it in", c.name)
	}
	file := c.files[0]
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("accept new host key of %s: %w", c.name, err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("accept new host key of %s: %w", c.name, err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key) + "\n"
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("accept new host key of %s: write %s: %w", c.name, file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("accept new host key of %s: write %s: %w", c.name, file, err)
	}
	return nil
}
