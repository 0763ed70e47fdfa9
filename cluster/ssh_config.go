package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
	"github.com/kevinburke/ssh_config"
)

// sshTarget is everything needed to reach one host over SSH, after merging
// the inventory with ~/.ssh/config and defaults.
type sshTarget struct {
	name     string // inventory name, for errors
	hostname string // what TCP connects to
	port     int
	user     string
	// identityFiles are tried in order after the agent's keys;
	// explicitIdentity says a missing one is worth mentioning.
	identityFiles    []string
	explicitIdentity bool
	knownHosts       []string
	proxyJump        string // "" or "none": direct
}

// addr is host:port as dialled and as looked up in known_hosts.
func (t sshTarget) addr() string {
	return net.JoinHostPort(t.hostname, strconv.Itoa(t.port))
}

// loadSSHConfig reads the OpenSSH client config at path ("" = ~/.ssh/config,
// "none" = none). A missing file is no config, as for ssh(1).
func loadSSHConfig(path string) (*ssh_config.Config, error) {
	if path == "none" {
		return nil, nil
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil
		}
		path = filepath.Join(home, ".ssh", "config")
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ssh config: %w", err)
	}
	defer f.Close()
	cfg, err := ssh_config.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("parse ssh config %s: %w", path, err)
	}
	return cfg, nil
}

// resolveTarget merges h with the ssh config: the inventory wins, the config
// fills what it leaves unset (looked up by h.Address, as `ssh ADDRESS`
// would), then OpenSSH's defaults (current user, port 22, ~/.ssh/id_*,
// ~/.ssh/known_hosts).
func resolveTarget(h config.Host, cfg *ssh_config.Config) (sshTarget, error) {
	alias := h.Address
	if alias == "" {
		alias = h.Name
	}
	get := func(key string) string {
		if cfg == nil {
			return ""
		}
		v, _ := cfg.Get(alias, key)
		return v
	}
	getAll := func(key string) []string {
		if cfg == nil {
			return nil
		}
		v, _ := cfg.GetAll(alias, key)
		return v
	}
	t := sshTarget{name: h.Name, hostname: alias, port: h.Port, user: h.User}
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
	switch {
	case h.IdentityFile != "":
		t.identityFiles = []string{h.IdentityFile}
		t.explicitIdentity = true
	case len(getAll("IdentityFile")) > 0:
		for _, f := range getAll("IdentityFile") {
			t.identityFiles = append(t.identityFiles, expand(f))
		}
		t.explicitIdentity = true
	default:
		if home, err := os.UserHomeDir(); err == nil {
			for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				t.identityFiles = append(t.identityFiles, filepath.Join(home, ".ssh", n))
			}
		}
	}
	switch {
	case h.KnownHosts != "":
		t.knownHosts = []string{h.KnownHosts}
	case get("UserKnownHostsFile") != "":
		for _, f := range strings.Fields(get("UserKnownHostsFile")) {
			t.knownHosts = append(t.knownHosts, expand(f))
		}
	default:
		if home, err := os.UserHomeDir(); err == nil {
			t.knownHosts = []string{filepath.Join(home, ".ssh", "known_hosts")}
		}
	}
	t.proxyJump = h.ProxyJump
	if t.proxyJump == "" {
		t.proxyJump = get("ProxyJump")
	}
	if t.proxyJump == "none" {
		t.proxyJump = ""
	}
	return t, nil
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
		switch s[i] {
		case 'd':
			b.WriteString(home)
		case 'u':
			b.WriteString(currentUser())
		case 'h':
			b.WriteString(host)
		case 'r':
			b.WriteString(remoteUser)
		case '%':
			b.WriteByte('%')
		default:
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
func jumpHost(spec string, target config.Host, inventory []config.Host) (config.Host, error) {
	chain := strings.Split(spec, ",")
	last := strings.TrimSpace(chain[len(chain)-1])
	rest := strings.Join(chain[:len(chain)-1], ",")
	for _, h := range inventory {
		if h.Name == last {
			if rest != "" {
				h.ProxyJump = rest
			}
			h.Transport = config.TransportSSH
			return h, nil
		}
	}
	j := config.Host{
		Transport:    config.TransportSSH,
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
