package launcher

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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

// On a restart with unchanged code the preflight runs beside the push
// (issue 20); a program deleted on a host since the last push may fail
// that early check, and the run must not stop there: the push puts the
// program back and the preflight runs again after it.
func TestRunRestoresProgramBeforeItsCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	job := localJob(t, `
echo "attempt $DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	rm w.sh
	exit 3
fi
`, "master_port = 29683\nmax_restarts = 1\n")
	text, err := os.ReadFile(job)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(job, bytes.Replace(text, []byte(`command = ["sh", "w.sh"]`), []byte(`command = ["./w.sh"]`), 1), 0o644))
	require.NoError(t, os.Chmod(filepath.Join(filepath.Dir(job), "code", "w.sh"), 0o755))
	var out, events bytes.Buffer
	res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
	require.NoError(t, err, "events:\n%s", events.String())
	assert.Equal(t, Succeeded, res.Outcome, "events:\n%s", events.String())
	assert.Equal(t, 2, res.Attempts)
	assert.Equal(t, "attempt 1\n", readLog(t, res, 2, "worker-0"))
	assert.Contains(t, events.String(), "attempt 2/2: pushed 1 file(s)")
	log, err := os.ReadFile(filepath.Join(res.LogDir, "events.log"))
	require.NoError(t, err)
	// Beside the push the file may or may not be back yet (here the push
	// is quick): what must hold is that a push that repaired something is
	// followed by a preflight of its own.
	assert.Regexp(t, `attempt 2/2: setup: preflight beside the push done[^\n]*\n(.*\n)*.*attempt 2/2: setup: preflight done`, string(log),
		"the restart's preflight ran beside the push, and again after the push repaired the host")
}
