package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Only drover's own run ids become paths: what a host reports in its run
// record or current link is checked against NewRunID's format.
func TestCheckRunID(t *testing.T) {
	assert.NoError(t, CheckRunID(NewRunID(time.Now())))
	assert.NoError(t, CheckRunID("20260312-120000-0a1b2c"))
	for _, id := range []string{
		"", "../../../../evil", "20260312-120000-0a1b2c/..", "..", ".", "20260312-120000-0A1B2C",
		"20260312-120000-0a1b2", "20260312-120000-0a1b2c\n", "x20260312-120000-0a1b2c", "r1", "/abs",
		"20260312-120000-0a1b2c\x00", "20260312-120000-\x1b[2J",
	} {
		err := CheckRunID(id)
		var bad *RunIDError
		if assert.True(t, errors.As(err, &bad), "%q", id) {
			assert.NotContains(t, err.Error(), "\x1b", "the id reaches the error quoted")
			assert.NotContains(t, err.Error(), "\n")
		}
	}
}
