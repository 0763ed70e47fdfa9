package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/launcher/agent"
)

// TestExitCodeEscapesErrors: an error quoting a host's bytes reaches the
// terminal with its control characters escaped, its lines kept.
func TestExitCodeEscapesErrors(t *testing.T) {
	var stderr bytes.Buffer
	code := exitCode(errors.New("h1 said \x1b[2J\x1b]0;owned\a\nsecond line"), &stderr)
	assert.Equal(t, agent.ExitFailed, code)
	assert.Equal(t, "drover: h1 said \\x1b[2J\\x1b]0;owned\\a\nsecond line\n", stderr.String())
}
