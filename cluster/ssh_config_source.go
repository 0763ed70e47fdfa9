package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kevinburke/ssh_config"
)

// sshConfig is the OpenSSH client config as drover reads it. Most files
// kevinburke/ssh_config parses and drover evaluates itself. A file with
// something that library cannot evaluate (Match exec, Match final, ...)
// must not stop drover from reaching hosts that ssh reaches: drover then
// asks OpenSSH's own client what it resolves for each host (ssh -G), or,
// where no ssh client is installed, ignores the blocks it cannot evaluate,
// with one warning each. A nil *sshConfig is no config.
type sshConfig struct {
	path   string
	parsed *ssh_config.Config // nil when resolved by ssh -G
	ssh    string             // the ssh client asked with -G; "" when parsed

	// fallback, when ssh -G itself fails (an option this ssh does not
	// know), is the file without the blocks drover cannot evaluate;
	// fallbackWarn says so, once.
	fallback     *ssh_config.Config
	fallbackWarn func()

	mu       sync.Mutex
	resolved map[string]map[string][]string // ssh -G's answer by alias, user, port
	failed   map[string]error               // or why it gave none
}

// sshGTimeout bounds one `ssh -G`, which may run Match exec commands.
const sshGTimeout = 10 * time.Second

// values returns what the config says of key for h (looked up as alias),
// nil when it says nothing. Keys are OpenSSH's names, e.g. "IdentityFile".
func (c *sshConfig) values(ctx context.Context, h Endpoint, alias, key string) ([]string, error) {
	switch {
	case c == nil:
		return nil, nil
	case c.parsed != nil:
		if key == "IdentityFile" || key == "CertificateFile" {
			v, _ := c.parsed.GetAll(alias, key)
			return v, nil
		}
		if v, _ := c.parsed.Get(alias, key); v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}
	got, err := c.askSSH(ctx, h, alias)
	if err != nil {
		if c.fallback == nil {
			return nil, err
		}
		c.fallbackWarn()
		return (&sshConfig{parsed: c.fallback}).values(ctx, h, alias, key)
	}
	return got[strings.ToLower(key)], nil
}

// askSSH returns `ssh -G` for alias, less what OpenSSH would use with no
// config at all (its defaults, asked the same way with -F /dev/null), so
// that drover's own defaults and the inventory apply as for a parsed file.
// The user and port the inventory gives are passed on (-l, -p), so that
// Match criteria see what ssh would see.
func (c *sshConfig) askSSH(ctx context.Context, h Endpoint, alias string) (map[string][]string, error) {
	args := []string{}
	if h.User != "" {
		args = append(args, "-l", h.User)
	}
	if h.Port != 0 {
		args = append(args, "-p", strconv.Itoa(h.Port))
	}
	key := strings.Join(append(args, alias), "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok := c.resolved[key]; ok {
		return got, c.failed[key]
	}
	if c.resolved == nil {
		c.resolved = map[string]map[string][]string{}
		c.failed = map[string]error{}
	}
	withConfig, err := runSSHG(ctx, c.ssh, c.path, args, alias)
	var defaults map[string][]string
	if err == nil {
		defaults, err = runSSHG(ctx, c.ssh, os.DevNull, args, alias)
	}
	if err != nil {
		c.resolved[key], c.failed[key] = nil, err // asked once per host
		return nil, err
	}
	for k, v := range withConfig {
		if slices.Equal(v, defaults[k]) {
			delete(withConfig, k)
		}
	}
	c.resolved[key] = withConfig
	return withConfig, nil
}

// runSSHG runs `ssh -G -F config ARGS alias` and returns its "key value"
// lines by key.
func runSSHG(ctx context.Context, sshPath, config string, args []string, alias string) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, sshGTimeout)
	defer cancel()
	argv := append([]string{"-G", "-F", config}, args...)
	argv = append(argv, "--", alias)
	cmd := exec.CommandContext(ctx, sshPath, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("resolve %s with `%s -G -F %s`: %w: %s", alias, sshPath, config, err, strings.TrimSpace(stderr.String()))
	}
	got := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k != "" {
			got[k] = append(got[k], v)
		}
	}
	return got, nil
}

// SSHConfigs shares the reading of ssh_config files among the dials that
// use it (DialOptions.SSHConfigs): each file is read once while it does not
// change, each host asked of ssh -G once, and each block drover ignores is
// warned about once. The zero value is ready to use, by many goroutines.
type SSHConfigs struct {
	mu     sync.Mutex
	byPath map[string]*loadedSSHConfig
	warned map[string]bool
}

type loadedSSHConfig struct {
	info fs.FileInfo
	cfg  *sshConfig
}

// loadSSHConfig reads the OpenSSH client config at opts.SSHConfigPath ("" =
// ~/.ssh/config, "none" = none), through opts.SSHConfigs when set. A
// missing file is no config, as for ssh(1).
func loadSSHConfig(opts DialOptions) (*sshConfig, error) {
	path := opts.SSHConfigPath
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
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ssh config: %w", err)
	}
	shared := opts.SSHConfigs
	if shared == nil {
		shared = &SSHConfigs{}
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if l, ok := shared.byPath[path]; ok && sameFiles([]fs.FileInfo{l.info}, []fs.FileInfo{info}) {
		return l.cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read ssh config: %w", err)
	}
	cfg, warnings, err := decodeSSHConfig(path, data, opts.OpenSSH)
	if err != nil {
		return nil, err
	}
	if cfg != nil && cfg.ssh != "" {
		kept, dropped := dropUnevaluable(path, data)
		if fb, err := ssh_config.Decode(bytes.NewReader(kept)); err == nil {
			cfg.fallback = fb
			var once sync.Once
			cfg.fallbackWarn = func() {
				once.Do(func() {
					opts.Warn(fmt.Sprintf("%s: %s -G failed; reading the file without the blocks drover cannot evaluate (%d)", path, cfg.ssh, len(dropped)))
				})
			}
		}
	}
	if shared.byPath == nil {
		shared.byPath = map[string]*loadedSSHConfig{}
		shared.warned = map[string]bool{}
	}
	shared.byPath[path] = &loadedSSHConfig{info: info, cfg: cfg}
	for _, w := range warnings {
		if !shared.warned[w] {
			shared.warned[w] = true
			opts.Warn(w)
		}
	}
	return cfg, nil
}

// decodeSSHConfig parses data; when the library cannot, it hands the file
// to OpenSSH's client (openssh: its path, "" = ssh on PATH, "none" = do
// not), else drops the Match blocks it cannot evaluate and says so in the
// warnings.
func decodeSSHConfig(path string, data []byte, openssh string) (*sshConfig, []string, error) {
	parsed, err := ssh_config.Decode(bytes.NewReader(data))
	if err == nil {
		return &sshConfig{path: path, parsed: parsed}, nil, nil
	}
	if openssh != "none" {
		if openssh == "" {
			openssh = "ssh"
		}
		if p, lerr := exec.LookPath(openssh); lerr == nil {
			return &sshConfig{path: path, ssh: p}, nil, nil
		}
	}
	kept, warnings := dropUnevaluable(path, data)
	parsed, err2 := ssh_config.Decode(bytes.NewReader(kept))
	if err2 != nil {
		// Nothing in a file drover cannot read breaks connecting: ssh
		// itself may read it, and the inventory says where hosts are.
		warnings = append(warnings, fmt.Sprintf("%s: ignoring the whole file: drover cannot read it (%v), and no OpenSSH client (ssh -G) is installed to ask", path, err2))
		return nil, warnings, nil
	}
	return &sshConfig{path: path, parsed: parsed}, warnings, nil
}

// dropUnevaluable blanks each Match block whose Match line the library
// cannot evaluate, and each Include of a file it cannot evaluate (their
// lines become empty, so line numbers stay), and returns a warning naming
// file and line for each.
func dropUnevaluable(path string, data []byte) ([]byte, []string) {
	lines := strings.Split(string(data), "\n")
	var warnings []string
	dropping := false
	for i, line := range lines {
		fields := strings.Fields(strings.ReplaceAll(line, "=", " "))
		if len(fields) > 0 && strings.EqualFold(fields[0], "Include") && !dropping {
			// The library reads an included file when it meets the
			// Include; one it cannot evaluate goes, with a warning.
			if _, err := ssh_config.Decode(strings.NewReader(strings.TrimSpace(line) + "\n")); err != nil {
				warnings = append(warnings, fmt.Sprintf("%s:%d: ignoring `%s`: drover cannot evaluate what it includes (%v), and no OpenSSH client (ssh -G) is installed to ask", path, i+1, strings.TrimSpace(line), err))
				lines[i] = ""
			}
			continue
		}
		if len(fields) > 0 && (strings.EqualFold(fields[0], "Host") || strings.EqualFold(fields[0], "Match")) {
			dropping = false
			if strings.EqualFold(fields[0], "Match") {
				if _, err := ssh_config.Decode(strings.NewReader(line + "\n")); err != nil {
					dropping = true
					warnings = append(warnings, fmt.Sprintf("%s:%d: ignoring the block `%s`: drover cannot evaluate it (%v), and no OpenSSH client (ssh -G) is installed to ask", path, i+1, strings.TrimSpace(line), err))
				}
			}
		}
		if dropping {
			lines[i] = ""
		}
	}
	return []byte(strings.Join(lines, "\n")), warnings
}
