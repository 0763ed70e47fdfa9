package launcher

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunRepairsEditedCode is issue 21's sixth item seen from a run: a
// pushed file changed on a host after the push (here by the job itself,
// between attempts) is put back by the push before the next attempt,
// which trusted the manifest and ran the changed file before.
func TestRunRepairsEditedCode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	job := localJob(t, `
echo "attempt $DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	printf 'echo tampered; exit 4\n' >w.new && mv w.new w.sh
	exit 3
fi
`, "master_port = 29681\nmax_restarts = 1\n")
	var out, events bytes.Buffer
	res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
	require.NoError(t, err, "events:\n%s", events.String())
	assert.Equal(t, Succeeded, res.Outcome, "events:\n%s", events.String())
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, "attempt 1\n", readLog(t, res, 2, "worker-0"))
	assert.Contains(t, events.String(), "attempt 2/2: pushed 1 file(s)")
}
