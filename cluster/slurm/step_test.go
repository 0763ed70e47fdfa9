package slurm

import (
	"bytes"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStderrFilter: the helper's header and trailer are taken out of the
// step's stderr however srun splits it into writes, and nothing else is
// changed, not even output that contains the marker byte.
func TestStderrFilter(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, step string
		st                   status
	}{
		{"plain", headerPrefix + "7.3\nerr1\nerr2\n" + trailerPref + "5\n", "err1\nerr2\n", "7.3", status{known: true, code: 5}},
		{"signal", headerPrefix + "7.4\n" + trailerPref + "signal 9\n", "", "7.4", status{known: true, code: 137, signal: syscall.SIGKILL}},
		{"srun before the step", "srun: warning: x\n" + headerPrefix + "1.0\nout" + trailerPref + "0\n", "srun: warning: x\nout", "1.0", status{known: true}},
		{"marker in output", headerPrefix + "1.1\na\x1eb\x1edrover-exi\n" + trailerPref + "0\n", "a\x1eb\x1edrover-exi\n", "1.1", status{known: true}},
		{"no trailer (killed)", headerPrefix + "1.2\npartial", "partial", "1.2", status{}},
		{"never started", "srun: error: Unable to create step\n", "srun: error: Unable to create step\n", "", status{}},
		{"bad trailer", headerPrefix + "1.3\n" + trailerPref + "x\n", trailerPref + "x\n", "1.3", status{}},
	} {
		for _, chunk := range []int{1, 2, 3, 7, 1 << 20} {
			t.Run(tc.name, func(t *testing.T) {
				var out bytes.Buffer
				var step string
				f := &stderrFilter{out: &out, onStep: func(s string) { step = s }}
				for in := tc.in; in != ""; {
					n := min(chunk, len(in))
					_, err := f.Write([]byte(in[:n]))
					require.NoError(t, err)
					in = in[n:]
				}
				require.NoError(t, f.drain(true))
				assert.Equal(t, tc.want, out.String(), "chunks of %d", chunk)
				assert.Equal(t, tc.step, step)
				assert.Equal(t, tc.st, f.st)
			})
		}
	}
}

// TestStderrFilterHoldsBackOnlyMarkers: output is passed on as it comes;
// only what could begin a trailer waits for the next write.
func TestStderrFilterHoldsBackOnlyMarkers(t *testing.T) {
	var out bytes.Buffer
	f := &stderrFilter{out: &out, onStep: func(string) {}}
	_, _ = f.Write([]byte(headerPrefix + "1.0\nprogress 50%"))
	assert.Equal(t, "progress 50%", out.String())
	_, _ = f.Write([]byte("\n\x1edrov"))
	assert.Equal(t, "progress 50%\n", out.String())
	_, _ = f.Write([]byte("x"))
	assert.Equal(t, "progress 50%\n\x1edrovx", out.String())
	assert.False(t, strings.Contains(out.String(), headerPrefix))
}
