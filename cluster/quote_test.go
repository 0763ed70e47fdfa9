package cluster

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShellQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"/usr/bin/python3", "/usr/bin/python3"},
		{"--flag=1", "'--flag=1'"},
		{"two words", "'two words'"},
		{"it's", `'it'\''s'`},
		{"$(id)", "'$(id)'"},
		{"`id`", "'`id`'"},
		{"a\nb", "'a\nb'"},
		{"~", "'~'"},
		{"*", "'*'"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			assert.Equal(t, tc.want, ShellQuote(tc.in))
		})
	}
}

// TestShellQuoteRoundTrip feeds quoted words to real shells and checks they
// come back byte for byte.
func TestShellQuoteRoundTrip(t *testing.T) {
	words := []string{"", " ", "it's", `"q"`, "$(echo x)", "`echo x`", "$HOME", "a\nb\n", "\\", "'", "''", "\\'", "*", "~", "-n", "!x", "#c", "x=y", "%s", "ü ✓", "\t", "{a,b}", "[ab]", "a;b|c&d>e<f"}
	for _, shell := range []string{"sh", "bash", "dash"} {
		t.Run(shell, func(t *testing.T) {
			path := testenv.LookPath(t, shell)
			for _, w := range words {
				out, err := exec.Command(path, "-c", "printf '%s' "+ShellQuote(w)).Output()
				require.NoError(t, err, "word %q", w)
				assert.Equal(t, w, string(out), "word %q", w)
			}
		})
	}
}

func TestShellCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  Cmd
		want string
	}{
		{"args only", Cmd{Args: []string{"echo", "hi there"}}, "exec echo 'hi there'"},
		{"dir", Cmd{Args: []string{"pwd"}, Dir: "my dir"}, "cd -- 'my dir' && exec pwd"},
		{"env sorted", Cmd{Args: []string{"env"}, Env: map[string]string{"B": "2", "A": "it's"}}, `export A='it'\''s' B=2 && exec env`},
		{"all", Cmd{Args: []string{"python3", "-c", "print(1)"}, Dir: "/w", Env: map[string]string{"RANK": "0"}},
			"cd -- /w && export RANK=0 && exec python3 -c 'print(1)'"},
		{"bad env name quoted", Cmd{Args: []string{"true"}, Env: map[string]string{"A;B": "x"}}, "export 'A;B'=x && exec true"},
		{"shell line as typed", Cmd{Shell: "nvidia-smi | grep MiB"}, "nvidia-smi | grep MiB"},
		{"shell line behind cd and export", Cmd{Shell: "a; b 'c'", Dir: "/w", Env: map[string]string{"X": "1"}},
			`cd -- /w && export X=1 && eval 'a; b '\''c'\'''`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ShellCommand(tc.cmd))
		})
	}
}

// A Shell line behind a cd that fails runs none of its commands, not only
// the first.
func TestShellCommandLineNeedsDir(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c := Cmd{Shell: "true; touch " + ShellQuote(marker), Dir: filepath.Join(dir, "missing")}
	err := exec.Command("sh", "-c", ShellCommand(c)).Run()
	assert.Error(t, err)
	assert.NoFileExists(t, marker)

	c.Dir = dir
	require.NoError(t, exec.Command("sh", "-c", ShellCommand(c)).Run())
	assert.FileExists(t, marker)
}

func TestShellCommandRunsInShell(t *testing.T) {
	dir := t.TempDir()
	c := Cmd{
		Args: []string{"sh", "-c", `printf '%s|%s|%s' "$V" "$1" "$(pwd)"`, "sh", "$(touch pwned)'\n"},
		Env:  map[string]string{"V": "`touch pwned2` $HOME"},
		Dir:  dir,
	}
	out, err := exec.Command("sh", "-c", ShellCommand(c)).Output()
	require.NoError(t, err)
	assert.Equal(t, "`touch pwned2` $HOME|$(touch pwned)'\n|"+dir, string(out))
}
