package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/droverhq/drover/cluster/sigclean"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Under nohup, SIGHUP stays ignored: asking to be notified of it would
// undo nohup.
func TestInterruptSignalsKeepNohup(t *testing.T) {
	if os.Getenv("DROVER_TEST_NOHUP_CHILD") == "1" {
		fmt.Println(interruptSignals())
		return
	}
	for _, tc := range []struct {
		name   string
		nohup  bool
		hupped bool
	}{{"plain", false, true}, {"nohup", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			self, err := os.Executable()
			require.NoError(t, err)
			args := []string{self, "-test.run=^TestInterruptSignalsKeepNohup$"}
			if tc.nohup {
				args = append([]string{"nohup"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "DROVER_TEST_NOHUP_CHILD=1")
			// The child starts with default dispositions (nohup then
			// ignores SIGHUP in the nohup case), whatever this test
			// inherited: under a nohup'd `make test` the plain child would
			// find SIGHUP ignored too.
			sigclean.Command(cmd)
			out, err := cmd.Output()
			require.NoError(t, err)
			assert.Equal(t, tc.hupped, strings.Contains(string(out), "hangup"), "signals: %s", out)
			assert.Contains(t, string(out), "interrupt")
		})
	}
}
