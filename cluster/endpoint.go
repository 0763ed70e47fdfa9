package cluster

// Transport kinds for Endpoint.Transport that Dial itself knows; others
// (slurm) come through DialOptions.Dialers.
const (
	TransportSSH   = "ssh"
	TransportLocal = "local"
)

// Endpoint is what a transport needs to reach one host, and nothing else:
// the job file's host (config.Host) converts to it (Host.Endpoint), so the
// transports do not depend on the job file and a test or another front
// end can reach hosts without one.
type Endpoint struct {
	// Name is the host's name in the fleet, used in every error.
	Name string
	// Address is an IP or DNS name (or an ssh_config alias); "local" for
	// local hosts. It is resolved at each dial.
	Address string
	// Transport is TransportSSH (also ""), TransportLocal, or a kind
	// that DialOptions.Dialers reaches.
	Transport string

	User         string
	Port         int    // 0: ssh_config's, else 22
	IdentityFile string // absolute; "": ssh_config / agent / defaults
	KnownHosts   string // absolute; "": ssh_config's, else ~/.ssh/known_hosts
	ProxyJump    string // "user@host:port", a chain, or a host of DialOptions.Inventory

	// Workdir is where the job's code lands on the host. A transport that
	// must check what the host sees of this machine's files (slurm) reads
	// it; SSH and local ignore it.
	Workdir string
}

// ValidEnvName reports whether name is a portable environment variable
// name: a shell identifier, the only kind a POSIX shell can export. The
// transports own the rule because they are what exports a command's
// environment; the job file's [job.env] and the plan check names with it
// too (config.ValidEnvName), so every layer agrees.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
