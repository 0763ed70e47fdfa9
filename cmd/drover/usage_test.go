package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		{[]string{"run"}, "usage: drover run JOB.toml"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"drover"}, tc.args...), &out, &errb)
		assert.Equal(t, exitConfig, code, "%v: stderr %q", tc.args, errb.String())
		assert.Contains(t, errb.String(), tc.msg, "%v", tc.args)
	}
}

// drover --version and drover version print the same: the build's line
// (as `agent version` prints it), its commit and Go release, and the
// agent each platform's hosts would get.
func TestVersionFlagAndCommand(t *testing.T) {
	var flagOut, cmdOut, errOut bytes.Buffer
	require.Equal(t, exitOK, run([]string{"drover", "--version"}, &flagOut, &errOut), errOut.String())
	require.Equal(t, exitOK, run([]string{"drover", "version"}, &cmdOut, &errOut), errOut.String())
	assert.Equal(t, flagOut.String(), cmdOut.String())
	lines := strings.Split(strings.TrimSpace(cmdOut.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 4, cmdOut.String())
	assert.Regexp(t, `^drover \S+ \S+/\S+$`, lines[0])
	assert.Regexp(t, `^commit: `, lines[1])
	assert.Regexp(t, `^go: go1\.`, lines[2])
	assert.Regexp(t, `^agent`, lines[3])
	assert.Equal(t, exitConfig, run([]string{"drover", "version", "x"}, &cmdOut, &errOut))
}
