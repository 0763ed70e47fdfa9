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
	"sync"

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

// newHostKeyChecker reads t's known_hosts files, through shared when it is
// not nil.
func newHostKeyChecker(t sshTarget, acceptNew bool, shared *KnownHosts) (*hostKeyChecker, error) {
	c := &hostKeyChecker{name: t.name, files: t.knownHosts, acceptNew: acceptNew}
	var infos []fs.FileInfo
	for _, f := range t.knownHosts {
		if fi, err := os.Stat(f); err == nil {
			c.existing = append(c.existing, f)
			infos = append(infos, fi)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
	}
	var err error
	if shared != nil {
		c.cb, err = shared.callback(c.existing, infos)
	} else {
		c.cb, err = knownhosts.New(c.existing...)
	}
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	return c, nil
}

// KnownHosts shares parsed known_hosts files among the dials that use it
// (DialOptions.KnownHosts). Parsing costs about 1.5 µs a line, 3 ms for a
// file of 2,000 entries (not rare on a machine that has seen many hosts),
// and a fan-out to N hosts would pay it N times, plus once per ProxyJump
// hop. A file that changed since it was parsed (a key recorded with
// AcceptNewHosts, an entry removed with ssh-keygen -R, any edit: another
// size, mtime or inode) is parsed again, so sharing never trusts content
// older than the file. The zero value is ready to use, by many goroutines
// at once.
type KnownHosts struct {
	mu     sync.Mutex
	sets   map[string]*parsedKnownHosts // by the files' paths, in order
	parses int                          // for tests: how many times files were parsed
}

type parsedKnownHosts struct {
	infos []fs.FileInfo // stat of each file, taken before it was read
	cb    ssh.HostKeyCallback
}

// callback returns the parsed files, parsing them unless the same files,
// unchanged since (infos: their stat now), were parsed before. The lock is
// held while parsing so that concurrent dials parse once, not each.
func (k *KnownHosts) callback(files []string, infos []fs.FileInfo) (ssh.HostKeyCallback, error) {
	key := strings.Join(files, "\x00")
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.sets[key]; ok && sameFiles(p.infos, infos) {
		return p.cb, nil
	}
	cb, err := knownhosts.New(files...)
	if err != nil {
		return nil, err
	}
	k.parses++
	if k.sets == nil {
		k.sets = map[string]*parsedKnownHosts{}
	}
	k.sets[key] = &parsedKnownHosts{infos: infos, cb: cb}
	return cb, nil
}

// sameFiles reports whether two stats of the same paths show files that
// have not changed in between: same inode, size and modification time.
func sameFiles(a, b []fs.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return false
		}
	}
	return true
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
