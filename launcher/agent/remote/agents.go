package remote

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/droverhq/drover/launcher/agent"
)

// Platform is a Go platform name, "linux/arm64".
type Platform string

// CarriedPlatforms are the platforms `make build` builds agents for.
var CarriedPlatforms = []Platform{"linux/amd64", "linux/arm64"}

// AgentName is the file name of the agent for p that `make build` puts
// beside the drover binary: "drover-agent-linux-arm64".
func AgentName(p Platform) string {
	return "drover-agent-" + strings.ReplaceAll(string(p), "/", "-")
}

// Binary is one local drover binary that can serve as an agent, described
// once per run (hashing it for every host of every attempt would cost a
// second of CPU per attempt on a large fleet).
type Binary struct {
	Path   string
	Size   int64
	Static bool // no ELF interpreter: runs without any libc
	// Sum is the hex SHA-256 of the file, which names it on hosts.
	Sum string
	// Version is what `drover agent version` prints when it runs.
	Version string
}

// Agents are the local drover binaries a host can get, by platform. Make
// them with FindAgents: in a literal, Self only serves local hosts.
type Agents struct {
	// Self is the running drover. Local hosts use it where it is; remote
	// hosts of its platform get it when no agent for it is carried.
	Self string
	// Carried maps a platform to its agent.
	Carried map[Platform]Binary
	self    *Binary
	selfFor Platform
}

// FindAgents looks beside self (the running drover binary) for the agents
// `make build` makes, and notes self's own platform. It does not fail: a
// platform without an agent fails when a host needs it (*NoAgentError).
func FindAgents(self string) Agents {
	a := Agents{Self: self, Carried: map[Platform]Binary{}}
	for _, p := range CarriedPlatforms {
		if b, ok := inspect(filepath.Join(filepath.Dir(self), AgentName(p)), p); ok {
			a.Carried[p] = b
		}
	}
	if bi, err := buildinfo.ReadFile(self); err == nil {
		p := Platform(buildSetting(bi.Settings, "GOOS") + "/" + buildSetting(bi.Settings, "GOARCH"))
		if b, ok := inspect(self, p); ok {
			a.self, a.selfFor = &b, p
		}
	}
	return a
}

// inspect describes the drover binary at path if it is one for p.
func inspect(path string, p Platform) (Binary, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return Binary{}, false
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil || Platform(buildSetting(bi.Settings, "GOOS")+"/"+buildSetting(bi.Settings, "GOARCH")) != p {
		return Binary{}, false
	}
	version, err := agent.FileVersion(path)
	if err != nil {
		return Binary{}, false
	}
	sum, err := fileSum(path)
	if err != nil {
		return Binary{}, false
	}
	return Binary{Path: path, Size: fi.Size(), Static: isStatic(path), Sum: sum, Version: version}, true
}

// isStatic reports whether the ELF file at path has no interpreter.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func buildSetting(s []debug.BuildSetting, key string) string {
	for _, kv := range s {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// For returns the binary for a host of platform p: the carried agent, else
// the running drover when it is built for p.
func (a Agents) For(host string, p Platform) (Binary, error) {
	if b, ok := a.Carried[p]; ok {
		return b, nil
	}
	if a.self != nil && a.selfFor == p {
		return *a.self, nil
	}
	return Binary{}, &NoAgentError{Host: host, Platform: p, Have: a.platforms(), Dir: filepath.Dir(a.Self)}
}

// candidates are the binaries a remote host may have from this drover:
// every carried agent, and the running drover when it can be one.
func (a Agents) candidates() []Binary {
	var bs []Binary
	for _, p := range CarriedPlatforms {
		if b, ok := a.Carried[p]; ok {
			bs = append(bs, b)
		}
	}
	if a.self != nil {
		if _, ok := a.Carried[a.selfFor]; !ok {
			bs = append(bs, *a.self)
		}
	}
	return bs
}

func (a Agents) platforms() []Platform {
	var ps []Platform
	for p := range a.Carried {
		ps = append(ps, p)
	}
	if a.self != nil {
		if _, ok := a.Carried[a.selfFor]; !ok {
			ps = append(ps, a.selfFor)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// NoAgentError is the error for a host whose platform this drover has no
// agent for; its message says how to build one.
type NoAgentError struct {
	Host     string
	Platform Platform
	Have     []Platform
	Dir      string // where FindAgents looked
}

func (e *NoAgentError) Error() string {
	have := "none"
	if len(e.Have) > 0 {
		var s []string
		for _, p := range e.Have {
			s = append(s, string(p))
		}
		have = strings.Join(s, ", ")
	}
	goos, goarch, _ := strings.Cut(string(e.Platform), "/")
	if goos != "linux" {
		return fmt.Sprintf("host %s is %s: drover agents run on Linux only (this drover has agents for %s)", e.Host, e.Platform, have)
	}
	return fmt.Sprintf("host %s is %s and this drover has no agent for it (it has %s): build one with "+
		"`CGO_ENABLED=0 GOOS=%s GOARCH=%s go build -o %s ./cmd/drover` in drover's source, or run `make build`",
		e.Host, e.Platform, have, goos, goarch, filepath.Join(e.Dir, AgentName(e.Platform)))
}

// unamePlatform maps `uname -sm` output ("Linux x86_64") to Go's names.
func unamePlatform(s string) (Platform, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return "", false
	}
	goos := strings.ToLower(f[0])
	var goarch string
	switch f[1] {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64":
		goarch = "arm64"
	case "i386", "i486", "i586", "i686", "i86pc":
		goarch = "386"
	case "armv6l", "armv7l", "armv8l", "arm":
		goarch = "arm"
	default:
		goarch = strings.ToLower(f[1])
	}
	return Platform(goos + "/" + goarch), true
}

// Describe says, one line per platform, which agent a host of that
// platform would get and what it answers to `drover agent version`, for
// `drover version`: an agent built from another commit than drover is the
// usual reason a host misbehaves after an upgrade.
func (a Agents) Describe() []string {
	var out []string
	for _, p := range a.platforms() {
		b, err := a.For("", p)
		if err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("agent for %s: %s (%s)", p, b.Version, b.Path))
	}
	if len(out) == 0 {
		out = append(out, "agents: none beside "+a.Self+" (run `make build`)")
	}
	return out
}
