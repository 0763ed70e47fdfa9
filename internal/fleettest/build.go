package fleettest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BuildDrover builds ./cmd/drover into dir and returns the binary's path.
// Fleet tests upload it as the agent and run it as the controller, so it
// must be the real program: built from this module, with the race detector
// when the test binary has it (so races in the controller and the agent
// fail tests too). DROVER_TEST_BINARY names a prebuilt binary instead.
// The caller owns dir and its lifetime; a fleet test needs it readable by
// the fleet's login user.
func BuildDrover(dir string) (string, error) {
	if p := os.Getenv("DROVER_TEST_BINARY"); p != "" {
		return p, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("build drover: cannot locate the module root")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "drover")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(gobin, append(args, "./cmd/drover")...)
	cmd.Dir = root
	cmd.Env = os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		// As the Makefile: deprecation warnings from C headers would
		// bury a real build error.
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// BuildAgent builds the static agent for linux/goarch that `make build`
// puts beside drover (scripts/build-agent: CGO_ENABLED=0, the NVML reader
// appended) as dir/drover-agent-linux-<goarch>, and returns its path.
// Cross-building costs CPU: callers build once per test binary.
func BuildAgent(dir, goarch string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("build agent: cannot locate the module root")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	out := filepath.Join(dir, "drover-agent-linux-"+goarch)
	cmd := exec.Command(filepath.Join(root, "scripts", "build-agent"), "linux", goarch, out)
	cmd.Env = os.Environ()
	if gobin, err := exec.LookPath("go"); err != nil {
		cmd.Env = append(cmd.Env, "GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	} else {
		cmd.Env = append(cmd.Env, "GO="+gobin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("scripts/build-agent linux %s: %w\n%s", goarch, err, out)
	}
	return out, nil
}

// SFTPRule is one rule of the hostile SFTP server (sftpproxy): the listing
// of Dir (absolute, as the client names it), from its Skip+1-th opening
// on, once, gets Names added to its first batch.
type SFTPRule struct {
	Dir   string     `json:"dir"`
	Skip  int        `json:"skip"`
	Names []SFTPName `json:"names"`
}

// SFTPName is a crafted directory entry: any bytes as its name ("x/..",
// "", "a\x00b", escapes), a directory or a regular file by its mode.
type SFTPName struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir"`
}

// HostileSFTP makes host i's sftp Subsystem internal/fleettest/sftpproxy
// in front of the real sftp-server, answering with rules; nil rules
// restore the fleet's own (and any other SetSSHD lines). Connections
// opened after it see it. Tests restore the host in a Cleanup.
func (f *Fleet) HostileSFTP(i int, rules []SFTPRule) error {
	if rules == nil {
		return f.SetSSHD(i, "")
	}
	f.proxyOnce.Do(func() {
		dir := filepath.Join(f.Dir, "sftpproxy")
		if f.proxyErr = os.MkdirAll(dir, 0o755); f.proxyErr == nil {
			f.proxyBin, f.proxyErr = buildSFTPProxy(dir)
		}
	})
	if f.proxyErr != nil {
		return f.proxyErr
	}
	b, err := json.Marshal(rules)
	if err != nil {
		return err
	}
	conf := filepath.Join(filepath.Dir(f.proxyBin), fmt.Sprintf("rules-%d.json", i))
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return fmt.Errorf("hostile sftp on host %d: %w", i, err)
	}
	return f.SetSSHD(i, fmt.Sprintf("Subsystem sftp %s %s\n", f.proxyBin, conf))
}

// buildSFTPProxy builds internal/fleettest/sftpproxy into dir and returns
// its path (a Subsystem line in SetSSHD's extra lines replaces the fleet's
// own sftp-server).
func buildSFTPProxy(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("build sftpproxy: cannot locate the module root")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "sftpproxy")
	cmd := exec.Command(gobin, "build", "-o", bin, "./internal/fleettest/sftpproxy")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build sftpproxy: %w\n%s", err, out)
	}
	return bin, nil
}
