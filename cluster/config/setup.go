package config

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// DefaultSetupTimeout bounds one host's setup (setup_timeout): long enough
// for a large environment to install from the network, short enough that a
// hung package index does not hold the run for good.
const DefaultSetupTimeout = 30 * time.Minute

// setupFields are the keys of a job's setup step (docs/environments.md).
var setupFields = []field{
	{"setup", `setup = ["uv sync --frozen"]`},
	{"setup_key", `setup_key = ["uv.lock"]`},
	{"setup_timeout", `setup_timeout = "30m"`},
}

// setupReader reads a job's setup keys: a concern of its own, beside
// jobReader's.
type setupReader struct{ *walker }

// read reads setup, setup_key and setup_timeout: the shell lines each
// host runs in its workdir before the first process starts, the files
// whose content decides whether a host must run them again, and how long
// they may take.
func (w setupReader) read(t tbl, j *Job) {
	if d, ok := w.duration(t, "setup_timeout"); ok {
		if d == 0 {
			w.add(t.key("setup_timeout"), "must be positive", "write "+t.schema.example("setup_timeout"))
		} else {
			j.SetupTimeout = d
		}
	}
	if v, ok := t.m["setup"]; ok {
		if s, isStr := v.(string); isStr {
			w.add(t.key("setup"), "must be an array of shell lines, not a string", fmt.Sprintf("write setup = [%q]", s))
		} else if lines, ok := w.strList(t, "setup"); ok {
			j.Setup = w.setupLines(t, lines)
		}
	}
	keys, ok := w.strList(t, "setup_key")
	if !ok {
		return
	}
	if len(j.Setup) == 0 {
		w.add(t.key("setup_key"), "setup_key is set but there is no setup to run",
			`add setup = ["uv sync --frozen"] (the commands the key files decide on), or remove setup_key`)
		return
	}
	for i, k := range keys {
		c := path.Clean(k)
		if k == "" || path.IsAbs(k) || c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(k, "~") {
			w.add(t.key("setup_key"), fmt.Sprintf("element %d (%q) is not a path inside the code directory", i+1, k),
				`name files relative to the code directory, as pushed: `+t.schema.example("setup_key"))
			return
		}
		keys[i] = c
	}
	j.SetupKey = keys
}

// setupLines checks that no line of setup is blank.
func (w setupReader) setupLines(t tbl, lines []string) []string {
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			w.add(t.key("setup"), fmt.Sprintf("line %d is empty", i+1),
				"remove the empty string, or write a command there: "+t.schema.example("setup"))
			return nil
		}
	}
	return lines
}
