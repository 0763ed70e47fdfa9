package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docDefaultRE is an optional key of docs/job-file.md's [job] table,
// commented out with its default: `# key = value  # what it means`.
var docDefaultRE = regexp.MustCompile(`^# ([a-z_]+) = (\S.*?)(?:\s{2,}#.*)?$`)

// docUnsetRE is an optional key whose default no value states (`# key:
// unset  # e.g. ...`): leaving it out is the only way to have it.
var docUnsetRE = regexp.MustCompile(`^# ([a-z_]+): unset\b`)

// TestJobFileDocDefaults: the defaults docs/job-file.md gives for the
// optional [job] keys are the code's. A job with every documented default
// written out loads as the same job as one that leaves them all out, and
// every [job] key the loader knows is documented.
func TestJobFileDocDefaults(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "job-file.md"))
	require.NoError(t, err)
	var lines []string
	documented := map[string]bool{}
	inJob, optional := false, false
	for _, l := range strings.Split(string(doc), "\n") {
		switch {
		case l == "[job]":
			inJob = true
		case strings.HasPrefix(l, "[") || l == "```":
			inJob = inJob && !strings.HasPrefix(l, "[") && l != "```"
		case inJob && strings.HasPrefix(l, "# optional"):
			optional = true
		case inJob:
			if k, _, ok := strings.Cut(l, " = "); ok && !strings.HasPrefix(l, "#") {
				documented[k] = true
			}
			if optional {
				if m := docDefaultRE.FindStringSubmatch(l); m != nil {
					lines = append(lines, m[1]+" = "+m[2])
					documented[m[1]] = true
				} else if m := docUnsetRE.FindStringSubmatch(l); m != nil {
					documented[m[1]] = true // no value means what leaving it out does
				}
			}
		}
	}
	require.Greater(t, len(lines), 20, "docs/job-file.md's optional [job] keys, each with its default")

	dir := t.TempDir()
	load := func(extra string) Job {
		t.Helper()
		job := filepath.Join(dir, "job.toml")
		text := fmt.Sprintf("[job]\nname = \"mnist\"\nframework = \"pytorch\"\ncommand = [\"python3\", \"train.py\"]\n%s\n[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n", extra)
		require.NoError(t, os.WriteFile(job, []byte(text), 0o644))
		cfg, err := Load(job, LoadOptions{})
		if !assert.NoError(t, err, "docs/job-file.md gives %q as a default", extra) {
			return Job{}
		}
		return emptyAsNil(cfg.Job)
	}
	bare := load("")
	for _, l := range lines {
		assert.Equal(t, bare, load(l), "docs/job-file.md says %s by default", l)
	}

	for _, f := range jobFields {
		assert.True(t, documented[f.name] || strings.Contains(string(doc), "\n[job."+f.name+"]"), "[job] key %s is not in docs/job-file.md", f.name)
	}
}

// emptyAsNil is j with its empty lists nil: `exclude = []` says what
// leaving exclude out says.
func emptyAsNil(j Job) Job {
	v := reflect.ValueOf(&j).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 && f.CanSet() {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	return j
}
