package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// EnvLine is the first line drover writes on the stdin of an agent started
// with RunOptions.EnvFromStdin: the command's environment as one JSON
// object. The rank's variables (RANK=3, tokens from [job.env]) so never
// enter the agent's own environ, nor the command line of the login shell
// that starts it: only the command's process holds them, and a user
// looking for RANK=3 in /proc/*/environ finds the rank, not its agent.
func EnvLine(env map[string]string) ([]byte, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode the command's environment: %w", err)
	}
	return append(b, '\n'), nil
}

// readEnvLine reads EnvLine's line from r.
func readEnvLine(r *bufio.Reader) (map[string]string, error) {
	line, err := r.ReadBytes('\n')
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, fmt.Errorf("read the command's environment from stdin: %w", err)
	}
	env := map[string]string{}
	if err := json.Unmarshal(line, &env); err != nil {
		return nil, fmt.Errorf("read the command's environment from stdin: not a JSON object: %w", err)
	}
	return env, nil
}

// childEnviron is the agent's own environment (the host's login
// environment) with env added over it, sorted by name.
func childEnviron(env map[string]string) []string {
	merged := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			merged[k] = v
		}
	}
	for k, v := range env {
		merged[k] = v
	}
	out := make([]string, 0, len(merged))
	for k, v := range merged {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds prog as the command's shell will: on the command's own
// PATH (from environ), relative to the working directory when it has a
// slash. The agent's own PATH is not the command's when [job.env] sets one.
func lookPath(prog string, environ []string) (string, error) {
	path := os.Getenv("PATH")
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if strings.Contains(prog, "/") {
		return prog, executable(prog)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, prog)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", prog, errNotFound)
}

// errNotFound is exec's own, so that callers tell "not found" (exit 127)
// from "cannot run" (126) the same way for both lookups.
var errNotFound = exec.ErrNotFound

// executable reports whether p is a file the command could execute.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w", p, fs.ErrPermission)
	}
	return nil
}
