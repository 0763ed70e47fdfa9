package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	// Revoked is "FILE:LINE" of the @revoked line that names the key (or
	// the CA that signed its certificate); such a key is never accepted.
	Revoked string
	// CertProblem says why a host certificate signed by a trusted
	// @cert-authority was refused (expired, not for this name).
	CertProblem string
}

// Error does not repeat the host: Dial wraps it as "connect to NAME (ADDR): ...".
func (e *HostKeyError) Error() string {
	host, port, _ := net.SplitHostPort(e.Addr)
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	switch {
	case e.Revoked != "":
		return fmt.Sprintf("host key REVOKED: presented %s key %s, which %s marks @revoked; drover never accepts it", e.KeyType, e.Fingerprint, e.Revoked)
	case e.CertProblem != "":
		return fmt.Sprintf("host certificate refused: presented %s %s: %s", e.KeyType, e.Fingerprint, e.CertProblem)
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
// (plain and hashed entries, @cert-authority and @revoked lines), optionally
// recording new ones.
type hostKeyChecker struct {
	name      string
	files     []string // all consulted
	acceptNew bool
	hashNew   bool // record new keys hashed (HashKnownHosts yes)
	db        *khDB
}

// newHostKeyChecker reads t's known_hosts files, through shared when it is
// not nil. Lines it cannot read are passed to warn (once per file version
// when shared) and skipped.
func newHostKeyChecker(t sshTarget, acceptNew bool, shared *KnownHosts, warn func(string)) (*hostKeyChecker, error) {
	c := &hostKeyChecker{name: t.name, files: t.knownHosts, acceptNew: acceptNew, hashNew: t.hashKnownHosts}
	var existing []string
	var infos []fs.FileInfo
	for _, f := range t.knownHosts {
		if fi, err := os.Stat(f); err == nil {
			existing = append(existing, f)
			infos = append(infos, fi)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
	}
	var err error
	if shared != nil {
		c.db, err = shared.parsed(existing, infos, warn)
	} else {
		c.db, err = parseKnownHosts(existing)
		if err == nil && warn != nil {
			for _, w := range c.db.skipped {
				warn(w)
			}
		}
	}
	if err != nil {
		return nil, err
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
// older than the file. A line that cannot be read is warned about once,
// however many dials and parses see it. The zero value is ready to use, by
// many goroutines at once.
type KnownHosts struct {
	mu     sync.Mutex
	sets   map[string]*parsedKnownHosts // by the files' paths, in order
	warned map[string]bool
	parses int // for tests: how many times files were parsed
}

type parsedKnownHosts struct {
	infos []fs.FileInfo // stat of each file, taken before it was read
	db    *khDB
}

// parsed returns the parsed files, parsing them unless the same files,
// unchanged since (infos: their stat now), were parsed before. The lock is
// held while parsing so that concurrent dials parse once, not each.
func (k *KnownHosts) parsed(files []string, infos []fs.FileInfo, warn func(string)) (*khDB, error) {
	key := strings.Join(files, "\x00")
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.sets[key]; ok && sameFiles(p.infos, infos) {
		return p.db, nil
	}
	db, err := parseKnownHosts(files)
	if err != nil {
		return nil, err
	}
	k.parses++
	if k.sets == nil {
		k.sets = map[string]*parsedKnownHosts{}
		k.warned = map[string]bool{}
	}
	k.sets[key] = &parsedKnownHosts{infos: infos, db: db}
	for _, w := range db.skipped {
		if !k.warned[w] && warn != nil {
			warn(w)
		}
		k.warned[w] = true
	}
	return db, nil
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

// algorithms returns the host key algorithms to offer addr, in order, as
// OpenSSH orders them: certificate algorithms first when an
// @cert-authority line covers the host (a host with a certificate would
// otherwise present its plain key, which known_hosts does not list); then
// the algorithms of the keys known for it, so that a host known by its
// ed25519 key is not asked for an RSA key it would then fail to match. A
// host covered by a CA but with no plain key known also gets the plain
// defaults after the certificates. Nil (library default) for an unknown
// host.
func (c *hostKeyChecker) algorithms(addr string) []string {
	var algos []string
	seen := map[string]bool{}
	add := func(as ...string) {
		for _, a := range as {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	cas := c.db.lookup(addr, khCA)
	known := c.db.lookup(addr, khHostKey)
	if len(cas) > 0 {
		for _, a := range ssh.SupportedAlgorithms().HostKeys {
			if strings.Contains(a, "-cert-") {
				add(a)
			}
		}
	}
	for _, k := range known {
		add(algorithmsForKeyType(k.key.Type())...)
	}
	if len(cas) > 0 && len(known) == 0 {
		for _, a := range ssh.SupportedAlgorithms().HostKeys {
			if !strings.Contains(a, "-cert-") {
				add(a)
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

// check is the ssh.HostKeyCallback. In OpenSSH's order: a revoked key (or
// one certified by a revoked CA) is refused; a certificate signed by a CA
// trusted for the host is verified (validity, host certificate, name among
// its principals); a certificate from no trusted CA is checked as its plain
// key; a plain key must be the one recorded, or is unknown.
func (c *hostKeyChecker) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	herr := &HostKeyError{
		Host:        c.name,
		Addr:        hostname,
		Fingerprint: ssh.FingerprintSHA256(key),
		KeyType:     key.Type(),
		Files:       c.files,
	}
	cert, isCert := key.(*ssh.Certificate)
	for _, r := range c.db.lookup(hostname, khRevoked) {
		if sameKey(r.key, key) || isCert && (sameKey(r.key, cert.Key) || sameKey(r.key, cert.SignatureKey)) {
			herr.Revoked = r.where()
			return herr
		}
	}
	if isCert {
		cas := c.db.lookup(hostname, khCA)
		trusted := func(auth ssh.PublicKey, _ string) bool {
			for _, ca := range cas {
				if sameKey(ca.key, auth) {
					return true
				}
			}
			return false
		}
		if trusted(cert.SignatureKey, "") {
			cc := &ssh.CertChecker{IsHostAuthority: trusted}
			if err := cc.CheckHostKey(hostname, remote, key); err != nil {
				herr.CertProblem = err.Error()
				return herr
			}
			return nil
		}
		key = cert.Key
		herr.Fingerprint, herr.KeyType = ssh.FingerprintSHA256(key), key.Type()
	}
	known := c.db.lookup(hostname, khHostKey)
	for _, k := range known {
		if sameKey(k.key, key) {
			return nil
		}
	}
	for _, k := range known {
		herr.Known = append(herr.Known, fmt.Sprintf("%s %s (%s)", k.key.Type(), ssh.FingerprintSHA256(k.key), k.where()))
	}
	if len(known) > 0 || !c.acceptNew {
		return herr
	}
	return c.record(hostname, key)
}

// record appends key for hostname to the first known_hosts file, creating
// it (and its directory) if need be, with the name hashed when the ssh
// config says HashKnownHosts yes. One O_APPEND write per line keeps
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
	if c.hashNew {
		line = hashedLine(hostname, key) + "\n"
	}
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

// UnknownHostsError is the unknown host keys of several hosts, said at
// once: a fleet met for the first time (an empty known_hosts) has every
// key unknown, and naming one host per try would take as many tries as
// hosts. It lists each host with the key it presented and gives one
// ssh-keyscan line that records them all. Unwrap gives each host's dial
// error, so errors.As still finds a *HostKeyError.
type UnknownHostsError struct {
	Keys []*HostKeyError // in the order of the hosts
	Errs []error         // each host's dial error, wrapping its Keys entry
}

func (e *UnknownHostsError) Unwrap() []error { return e.Errs }

// Error names every host on a line of its own, after one line with the fix.
func (e *UnknownHostsError) Error() string {
	type group struct{ port, file string }
	var order []group
	hosts := map[group][]string{}
	var files []string
	for _, k := range e.Keys {
		host, port, _ := net.SplitHostPort(k.Addr)
		g := group{port: port, file: "~/.ssh/known_hosts"}
		if len(k.Files) > 0 {
			g.file = k.Files[0]
		}
		if _, ok := hosts[g]; !ok {
			order = append(order, g)
		}
		if !slices.Contains(hosts[g], host) {
			hosts[g] = append(hosts[g], host)
		}
		for _, f := range k.Files {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	var scans []string
	for _, g := range order {
		scan := "ssh-keyscan "
		if g.port != "22" {
			scan += "-p " + g.port + " "
		}
		scans = append(scans, scan+strings.Join(hosts[g], " ")+" >> "+g.file)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "host keys of %d hosts unknown, not in %s (run with --accept-new-hosts, or add them all with `%s`):",
		len(e.Keys), strings.Join(files, ", "), strings.Join(scans, "; "))
	for _, k := range e.Keys {
		fmt.Fprintf(&b, "\n%s (%s): presented %s key %s", k.Host, k.Addr, k.KeyType, k.Fingerprint)
	}
	return b.String()
}

// UnknownHosts returns the dial errors of hosts whose keys are unknown
// (not changed, revoked or a refused certificate: those are said one by
// one, each with its own fix) as one *UnknownHostsError when there are two
// or more; nil otherwise (one unknown host is said by its own error).
func UnknownHosts(errs []error) error {
	u := &UnknownHostsError{}
	for _, err := range errs {
		if hke := unknownHostKey(err); hke != nil {
			u.Keys = append(u.Keys, hke)
			u.Errs = append(u.Errs, err)
		}
	}
	if len(u.Keys) < 2 {
		return nil
	}
	return u
}

// IsUnknownHostKey reports whether err is a dial refused for a host key
// known_hosts does not list (UnknownHosts collects them).
func IsUnknownHostKey(err error) bool { return unknownHostKey(err) != nil }

func unknownHostKey(err error) *HostKeyError {
	var hke *HostKeyError
	if errors.As(err, &hke) && len(hke.Known) == 0 && hke.Revoked == "" && hke.CertProblem == "" {
		return hke
	}
	return nil
}
