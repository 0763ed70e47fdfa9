package cluster

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// drover reads known_hosts itself rather than through x/crypto's knownhosts
// (or skeema/knownhosts, a wrapper around it): knownhosts.New refuses a whole
// file for one line it cannot parse, so a typo or a key type it does not
// know blocked every host, where OpenSSH skips the line. Reading the lines
// ourselves (each with ssh.ParseKnownHosts) also gives what host
// certificates need: the @cert-authority keys for a host, to verify its
// certificate with ssh.CertChecker and to ask for certificate algorithms
// first, and @revoked keys, refused even when signed by a trusted CA.

// khMarker is what a known_hosts line says about its key.
type khMarker int

const (
	khHostKey khMarker = iota // the host's own key
	khCA                      // @cert-authority: signs host certificates
	khRevoked                 // @revoked: never accepted
)

// khEntry is one known_hosts line that parsed.
type khEntry struct {
	marker   khMarker
	patterns []string // host patterns, as written (maybe hashed, negated, wildcards)
	key      ssh.PublicKey
	file     string
	line     int
}

func (e khEntry) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

// khDB is the parsed known_hosts files of one target, in order.
type khDB struct {
	entries []khEntry
	// skipped says, for each line that did not parse, file, line and
	// why; the dial warns about each once and goes on without it.
	skipped []string
}

// parseKnownHosts reads files (each must exist) line by line. A line that
// does not parse is skipped and reported in skipped, as OpenSSH skips it;
// only a file that cannot be read is an error.
func parseKnownHosts(files []string) (*khDB, error) {
	db := &khDB{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 || line[0] == '#' {
				continue
			}
			e, err := parseKnownHostsLine(line)
			if err != nil {
				db.skipped = append(db.skipped, fmt.Sprintf("%s:%d: skipped a known_hosts line drover cannot read (%v)", file, n, err))
				continue
			}
			e.file, e.line = file, n
			db.entries = append(db.entries, e)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read known_hosts %s: %w", file, err)
		}
	}
	return db, nil
}

func parseKnownHostsLine(line []byte) (khEntry, error) {
	marker, hosts, key, _, _, err := ssh.ParseKnownHosts(line)
	if err != nil {
		return khEntry{}, err
	}
	e := khEntry{patterns: hosts, key: key}
	switch marker {
	case "":
	case "cert-authority":
		e.marker = khCA
	case "revoked":
		e.marker = khRevoked
	default:
		return khEntry{}, fmt.Errorf("unknown marker @%s", marker)
	}
	return e, nil
}

// lookup returns the entries of kind m whose patterns match addr (host:port
// as dialled).
func (db *khDB) lookup(addr string, m khMarker) []khEntry {
	name := knownhosts.Normalize(addr)
	var out []khEntry
	for _, e := range db.entries {
		if e.marker == m && matchHostPatterns(e.patterns, name) {
			out = append(out, e)
		}
	}
	return out
}

// matchHostPatterns reports whether name (normalized: "host" on port 22,
// "[host]:port" otherwise) matches a known_hosts host field: some pattern
// matches and no negated one ("!pat") does. Patterns are hashed
// ("|1|salt|hash"), or plain with the wildcards * and ?, compared without
// regard to case as OpenSSH does.
func matchHostPatterns(patterns []string, name string) bool {
	lower := strings.ToLower(name)
	matched := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		var ok bool
		if strings.HasPrefix(p, "|1|") {
			ok = matchHashed(p, name)
		} else {
			ok = wildcardMatch(strings.ToLower(p), lower)
		}
		if ok && neg {
			return false
		}
		matched = matched || ok
	}
	return matched
}

// matchHashed checks a HashKnownHosts entry: |1|base64(salt)|base64(HMAC-SHA1(salt, name)).
func matchHashed(p, name string) bool {
	parts := strings.Split(p, "|")
	if len(parts) != 4 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	want, err2 := base64.StdEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false
	}
	mac := hmac.New(sha1.New, salt)
	mac.Write([]byte(name))
	return hmac.Equal(mac.Sum(nil), want)
}

// wildcardMatch matches s against an OpenSSH pattern: * any run of
// characters, ? any one; nothing else is special.
func wildcardMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if wildcardMatch(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}

// sameKey compares public keys by their wire form.
func sameKey(a, b ssh.PublicKey) bool {
	return bytes.Equal(a.Marshal(), b.Marshal())
}

// hashedLine is a known_hosts line for addr with its name hashed, as
// OpenSSH writes it with HashKnownHosts yes.
func hashedLine(addr string, key ssh.PublicKey) string {
	return knownhosts.Line([]string{knownhosts.HashHostname(knownhosts.Normalize(addr))}, key)
}

// fakeAddr is the net.Addr ssh.CertChecker wants alongside the host name.
func fakeAddr(hostport string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil || a.IP == nil {
		return &net.TCPAddr{IP: net.IPv4zero}
	}
	return a
}
