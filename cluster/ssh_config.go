package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// sshTarget is everything needed to reach one host over SSH, after merging
// the inventory with ~/.ssh/config and defaults.
type sshTarget struct {
	name     string // inventory name, for errors
	alias    string // the address as given, looked up in ssh_config
	hostname string // what TCP connects to
	port     int
	user     string
	// identityFiles are tried in order after the agent's keys;
	// explicitIdentity says a missing one is worth mentioning.
	identityFiles    []string
	explicitIdentity bool
	knownHosts       []string
	hashKnownHosts   bool     // HashKnownHosts yes: record new keys hashed
	certificateFiles []string // CertificateFile: user certificates
	proxyJump        string   // "" or "none": direct
	proxyCommand     string   // ssh_config ProxyCommand, tokens unexpanded; "": none
}

// addr is host:port as dialled and as looked up in known_hosts.
func (t sshTarget) addr() string {
	return net.JoinHostPort(t.hostname, strconv.Itoa(t.port))
}

// resolveTarget merges h with the ssh config: the inventory wins, the config
// fills what it leaves unset (looked up by h.Address, as `ssh ADDRESS`
// would), then OpenSSH's defaults (current user, port 22, ~/.ssh/id_*,
// ~/.ssh/known_hosts). A ProxyJump (inventory or config) wins over a
// ProxyCommand.
func resolveTarget(ctx context.Context, h Endpoint, cfg *sshConfig) (sshTarget, error) {
	alias := h.Address
	if alias == "" {
		alias = h.Name
	}
	var lookupErr error
	getAll := func(key string) []string {
		v, err := cfg.values(ctx, h, alias, key)
		if err != nil && lookupErr == nil {
			lookupErr = err
		}
		return v
	}
	get := func(key string) string {
		if v := getAll(key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	t := sshTarget{name: h.Name, alias: alias, hostname: alias, port: h.Port, user: h.User}
	if t.name == "" {
		t.name = alias
	}
	if hn := get("HostName"); hn != "" {
		t.hostname = strings.ReplaceAll(hn, "%h", alias)
	}
	if t.user == "" {
		t.user = get("User")
	}
	if t.user == "" {
		t.user = currentUser()
	}
	if t.port == 0 {
		if p := get("Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				return t, fmt.Errorf("ssh config: Port %q for %s is not a port number", p, alias)
			}
			t.port = n
		}
	}
	if t.port == 0 {
		t.port = 22
	}
	expand := func(s string) string { return expandSSHTokens(s, t.hostname, t.user) }
	t.identityFiles, t.explicitIdentity = identityFiles(h.IdentityFile, getAll, expand)
	t.knownHosts = knownHostsFiles(h.KnownHosts, get, expand)
	for _, f := range getAll("CertificateFile") {
		t.certificateFiles = append(t.certificateFiles, expand(f))
	}
	t.hashKnownHosts = strings.EqualFold(get("HashKnownHosts"), "yes")
	t.proxyJump = h.ProxyJump
	if t.proxyJump == "" {
		t.proxyJump = get("ProxyJump")
	}
	if t.proxyJump == "none" {
		t.proxyJump = ""
	}
	if t.proxyJump == "" && h.ProxyJump == "" {
		if pc := get("ProxyCommand"); pc != "none" {
			t.proxyCommand = pc
		}
	}
	return t, lookupErr
}

// identityFiles is where a host's keys come from: the inventory's
// identity_file, else the ssh config's IdentityFile lines, else OpenSSH's
// default keys. explicit says the user named them, so a missing one is
// reported rather than skipped as a default that does not exist.
func identityFiles(inventory string, getAll func(string) []string, expand func(string) string) (files []string, explicit bool) {
	switch {
	case inventory != "":
		return []string{inventory}, true
	case len(getAll("IdentityFile")) > 0:
		for _, f := range getAll("IdentityFile") {
			files = append(files, expand(f))
		}
		return files, true
	}
	if home, err := os.UserHomeDir(); err == nil {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			files = append(files, filepath.Join(home, ".ssh", n))
		}
	}
	return files, false
}

// knownHostsFiles is where a host's key is checked: the inventory's
// known_hosts, else the ssh config's UserKnownHostsFile, else
// ~/.ssh/known_hosts.
func knownHostsFiles(inventory string, get func(string) string, expand func(string) string) []string {
	switch {
	case inventory != "":
		return []string{inventory}
	case get("UserKnownHostsFile") != "":
		var files []string
		for _, f := range strings.Fields(get("UserKnownHostsFile")) {
			files = append(files, expand(f))
		}
		return files
	}
	if home, err := os.UserHomeDir(); err == nil {
		return []string{filepath.Join(home, ".ssh", "known_hosts")}
	}
	return nil
}

// currentUser is ssh's default login name.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// expandSSHTokens expands the ssh_config tokens drover supports in paths:
// a leading ~, %d (local home), %u (local user), %h (remote host), %r
// (remote user) and %%.
func expandSSHTokens(s, host, remoteUser string) string {
	home, _ := os.UserHomeDir()
	if s == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(s, "~/"); ok {
		s = filepath.Join(home, rest)
	}
	return expandPercent(s, map[byte]string{
		'd': home, 'u': currentUser(), 'h': host, 'r': remoteUser,
	})
}

// expandPercent replaces ssh_config's %-tokens in s with their values;
// %% is a %, and an unknown token is left as written.
func expandPercent(s string, tokens map[byte]string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if v, ok := tokens[s[i]]; ok {
			b.WriteString(v)
		} else if s[i] == '%' {
			b.WriteByte('%')
		} else {
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// jumpHost turns a ProxyJump value into the Host to dial first: an
// inventory host by name, or "[user@]host[:port]" inheriting the target's
// identity and known_hosts. Only the last hop of a comma-separated chain is
// returned along with the rest of the chain, which becomes its own jump.
func jumpHost(spec string, target Endpoint, inventory []Endpoint) (Endpoint, error) {
	chain := strings.Split(spec, ",")
	last := strings.TrimSpace(chain[len(chain)-1])
	rest := strings.Join(chain[:len(chain)-1], ",")
	for _, h := range inventory {
		if h.Name == last {
			if rest != "" {
				h.ProxyJump = rest
			}
			h.Transport = TransportSSH
			return h, nil
		}
	}
	j := Endpoint{
		Transport:    TransportSSH,
		IdentityFile: target.IdentityFile,
		KnownHosts:   target.KnownHosts,
		ProxyJump:    rest,
	}
	hostport := last
	if u, hp, ok := strings.Cut(last, "@"); ok {
		j.User, hostport = u, hp
	}
	host := hostport
	if strings.HasPrefix(hostport, "[") || strings.Count(hostport, ":") == 1 {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			return j, fmt.Errorf("proxy jump %q: %w", spec, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return j, fmt.Errorf("proxy jump %q: bad port %q", spec, p)
		}
		host, j.Port = h, n
	}
	if host == "" {
		return j, fmt.Errorf("proxy jump %q: no host", spec)
	}
	j.Name, j.Address = host, host
	return j, nil
}
