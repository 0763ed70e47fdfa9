package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/launcher/agent"
)

// TestUsageErrorsExit2: every way of calling drover wrongly exits with the
// documented usage status 2 and says what was wrong (issue 21 item 11:
// an unknown command exited 3, urfave/cli's own status).
func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bogus"}, `drover: unknown command "bogus" (run 'drover --help' for the list)`},
		{[]string{"bogus", "job.toml"}, `unknown command "bogus"`},
		{[]string{"agent", "bogus"}, `drover: unknown command "bogus" (run 'drover agent --help' for the list)`},
		{[]string{"help", "bogus"}, `unknown command "bogus"`},
		{[]string{"plan", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run"}, "usage: drover run [--log-dir LOG_DIR] [--quiet] [--force] [--fresh] [--detach] [--queue] [--queue-timeout DURATION] [--inventory FILE] [--accept-new-hosts] JOB.toml"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"drover"}, tc.args...), &out, &errb)
		assert.Equal(t, agent.ExitUsage, code, "%v: stderr %q", tc.args, errb.String())
		assert.Contains(t, errb.String(), tc.msg, "%v", tc.args)
	}
}

// drover --version and drover version print the same: the build's line
// (as `agent version` prints it), its commit and Go release, and the
// agent each platform's hosts would get.
func TestVersionFlagAndCommand(t *testing.T) {
	var flagOut, cmdOut, errOut bytes.Buffer
	require.Equal(t, agent.ExitOK, run([]string{"drover", "--version"}, &flagOut, &errOut), errOut.String())
	require.Equal(t, agent.ExitOK, run([]string{"drover", "version"}, &cmdOut, &errOut), errOut.String())
	assert.Equal(t, flagOut.String(), cmdOut.String())
	lines := strings.Split(strings.TrimSpace(cmdOut.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 4, cmdOut.String())
	assert.Regexp(t, `^drover \S+ \S+/\S+$`, lines[0])
	assert.Regexp(t, `^commit: `, lines[1])
	assert.Regexp(t, `^go: go1\.`, lines[2])
	assert.Regexp(t, `^agent`, lines[3])
	assert.Equal(t, agent.ExitUsage, run([]string{"drover", "version", "x"}, &cmdOut, &errOut))
}

// TestUsageNamesEveryFlag: a command called with the wrong arguments
// prints a usage line that names every flag it takes and its arguments,
// because the line is made from the flag definitions (agent.UsageLine).
// The hand-written lines had drifted: `drover run`'s named no flag at all.
func TestUsageNamesEveryFlag(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, tc := range [][]string{
		{"plan"}, {"probe"}, {"exec"}, {"push"}, {"run"}, {"submit"}, {"checkpoints"},
		{"agent", "run"}, {"agent", "stop", "--pidfile", "p", "x"}, {"agent", "preflight", "a", "b"},
		{"agent", "probe", "x"}, {"agent", "version", "x"}, {"agent", "sftp", "x"}, {"version", "x"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"drover"}, tc...), &out, &errb)
		assert.Equal(t, agent.ExitUsage, code, "%v: stderr %q", tc, errb.String())
		cmd := findCommand(app.Commands, tc)
		require.NotNil(t, cmd, "%v", tc)
		i := strings.Index(errb.String(), "usage: ")
		require.True(t, i >= 0, "%v: no usage line in %q", tc, errb.String())
		line := errb.String()[i:]
		for _, f := range cmd.Flags {
			if v, ok := f.(cli.VisibleFlag); ok && v.IsVisible() {
				assert.Contains(t, line, "--"+f.Names()[0], "%v: the usage line leaves out a flag", tc)
			}
		}
		assert.Contains(t, line, cmd.ArgsUsage, "%v", tc)
	}
}

// findCommand follows args down the command tree as far as they name
// commands.
func findCommand(cmds []*cli.Command, args []string) *cli.Command {
	var found *cli.Command
	for _, a := range args {
		var next *cli.Command
		for _, c := range cmds {
			if c.Name == a {
				next = c
			}
		}
		if next == nil {
			break
		}
		found, cmds = next, next.Subcommands
	}
	return found
}

// TestReadmeCommandTable keeps the README's command table true to the
// flags: each row's first cell names only flags its command has, and
// every flag it has but the fleet flags (which the sentence under the
// table covers) and --help.
func TestReadmeCommandTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	app := newApp(io.Discard, io.Discard)
	rows := 0
	for _, line := range strings.Split(string(b), "\n") {
		m := regexp.MustCompile("^\\| `drover ([a-z]+(?: [a-z]+)?)[ `]").FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		// A row names a command and, for one with subcommands (check
		// net), the subcommand.
		cmd := findCommand(app.Commands, strings.Fields(m[1]))
		require.NotNil(t, cmd, "README's command table has drover %s, which does not exist", m[1])
		cell := strings.SplitN(line, "` |", 2)[0]
		real := map[string]bool{}
		for _, f := range cmd.Flags {
			name := f.Names()[0]
			real[name] = true
			if name == flagInventory || name == flagAcceptNewHosts || f == cli.HelpFlag {
				continue
			}
			assert.Contains(t, cell, "--"+name, "README's row for drover %s leaves out --%s", cmd.Name, name)
		}
		for _, f := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(cell, -1) {
			assert.True(t, real[f[1]], "README's row for drover %s names --%s, which it does not have", cmd.Name, f[1])
		}
	}
	assert.GreaterOrEqual(t, rows, 7, "README.md has no command table")
}
