package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/restart"
)

// The breaker (restart.Breaker) learns of an attempt what policy()
// gives: the name of the checkpoint it resumed from, none for a start
// from scratch.
func TestAttemptProgressPolicy(t *testing.T) {
	from := &checkpoint.Entry{Seq: 1, Name: "step-10"}
	assert.Equal(t, restart.Progress{Ran: true}, attemptProgress{ran: true}.policy())
	assert.Equal(t, restart.Progress{Ran: true, Resumed: "step-10", Newer: true}, attemptProgress{ran: true, resumed: from, newer: true}.policy())
	var b restart.Breaker
	require.NoError(t, b.Judge(1, attemptProgress{ran: true}.policy(), errors.New("x")), "from scratch: not judged")
	require.Error(t, b.Judge(1, attemptProgress{ran: true, resumed: from}.policy(), errors.New("x")))
}

// stepScript is a training stand-in: rank 0 counts steps from the
// checkpoint it resumes from, writes one (atomically: a temporary name,
// then a rename) every 10 steps, and exits 1 at the step failAt computes
// from $start and $DROVER_RESTART_COUNT; the other rank waits.
func stepScript(failAt string) string {
	return `
if [ "$RANK" != 0 ]; then sleep 1000; exit 0; fi
start=0
if [ -n "$DROVER_RESUME_FROM" ]; then start=${DROVER_RESUME_FROM##*step-}; fi
echo "resumed from step $start"
fail=$((` + failAt + `))
mkdir -p "$DROVER_CHECKPOINT_DIR"
s=$start
while :; do
	s=$((s + 1))
	if [ $((s % 10)) = 0 ]; then
		mkdir "$DROVER_CHECKPOINT_DIR/.tmp-$s" && echo "$s" > "$DROVER_CHECKPOINT_DIR/.tmp-$s/state" &&
			mv "$DROVER_CHECKPOINT_DIR/.tmp-$s" "$DROVER_CHECKPOINT_DIR/step-$s"
	fi
	if [ $s = $fail ]; then echo "failing at step $s"; exit 1; fi
	sleep 0.02
done
`
}

// A job that checkpoints every 10 steps and always fails at step 15
// resumes from step-10 again and again: with max_restarts = 10 and
// max_restarts_without_progress = 2 it stops after exactly 3 attempts
// (the first made step-10, the next two made nothing newer), exit 1, and
// says why. A job that fails at varying steps but checkpoints before each
// failure uses all its restarts.
func TestCrashLoopBreaker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	run := func(t *testing.T, job string) (*Result, string) {
		t.Helper()
		var out, events bytes.Buffer
		res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
		require.NoError(t, err, "events:\n%s", events.String())
		t.Logf("events:\n%s", events.String())
		return res, events.String()
	}

	t.Run("always fails at step 15", func(t *testing.T) {
		res, events := run(t, localJob(t, stepScript("15"), "master_port = 29681\nmax_restarts = 10\nmax_restarts_without_progress = 2\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 3, res.Attempts)
		require.Error(t, res.Err)
		assert.Contains(t, res.Err.Error(), "2 restarts in a row made no progress: every attempt resumed from step-10 and failed before a newer checkpoint; last failure: worker-0@a exited 1")
		assert.Contains(t, events, "job local failed: 2 restarts in a row made no progress")
		for n := 2; n <= 3; n++ {
			assert.Contains(t, readLog(t, res, n, "worker-0"), "resumed from step 10\nfailing at step 15\n", "attempt %d", n)
		}
	})

	t.Run("fails at varying steps but keeps checkpointing", func(t *testing.T) {
		res, _ := run(t, localJob(t, stepScript("start + 12 + DROVER_RESTART_COUNT * 3 % 7"), "master_port = 29682\nmax_restarts = 3\nmax_restarts_without_progress = 1\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 4, res.Attempts, "every restart used")
		assert.ErrorContains(t, res.Err, "no restarts left (max_restarts = 3)")
		assert.NotContains(t, res.Err.Error(), "no progress")
		last := readLog(t, res, 4, "worker-0")
		assert.True(t, strings.HasPrefix(last, "resumed from step 30\n"), "the fourth attempt resumed from the third's checkpoint: %q", last)
	})

	// A script that only touches the checkpoint it resumed from before
	// failing makes no progress: before the fix each touch was a newer
	// checkpoint to the breaker, which never tripped (all 10 restarts
	// used). It waits for drover's copy on host b (checkpoint_copies = 2),
	// through which drover reads the touched entry's content.
	t.Run("touches its checkpoint before failing", func(t *testing.T) {
		script := `
if [ "$RANK" != 0 ]; then sleep 1000; exit 0; fi
if [ -z "$DROVER_RESUME_FROM" ]; then
	mkdir -p "$DROVER_CHECKPOINT_DIR/.tmp" && echo 10 > "$DROVER_CHECKPOINT_DIR/.tmp/state" &&
		mv "$DROVER_CHECKPOINT_DIR/.tmp" "$DROVER_CHECKPOINT_DIR/step-10"
else
	echo "resumed from $DROVER_RESUME_FROM"
	touch "$DROVER_CHECKPOINT_DIR/step-10/state" "$DROVER_CHECKPOINT_DIR/step-10"
fi
# drover's copy of this attempt's version (#restarts+1) on host b
copy="$HOME/wd-b/.drover/checkpoints/$(printf %06d $((DROVER_RESTART_COUNT + 1)))/step-10"
for i in $(seq 100); do
	[ -e "$copy" ] && break
	sleep 0.1
done
echo "failing"; exit 1
`
		res, events := run(t, localJob(t, script, "master_port = 29684\nmax_restarts = 10\nmax_restarts_without_progress = 2\n"))
		assert.Equal(t, Failed, res.Outcome)
		assert.Equal(t, 3, res.Attempts, "the breaker trips after 2 restarts that only touched step-10")
		require.Error(t, res.Err)
		assert.Contains(t, res.Err.Error(), "2 restarts in a row made no progress: every attempt resumed from step-10")
		assert.Contains(t, events, "2 restarts in a row made no progress")
	})

	t.Run("without checkpoints: unaffected", func(t *testing.T) {
		res, _ := run(t, localJob(t, `if [ "$RANK" = 0 ]; then exit 1; fi; sleep 1000`, "master_port = 29683\nmax_restarts = 3\nmax_restarts_without_progress = 1\n"))
		assert.Equal(t, 4, res.Attempts)
		assert.ErrorContains(t, res.Err, fmt.Sprintf("no restarts left (max_restarts = %d)", 3))
	})
}
