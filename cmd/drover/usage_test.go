package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
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
