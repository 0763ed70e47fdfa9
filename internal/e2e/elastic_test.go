package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// Issue 41: with min_hosts = 2 and no spare, a host whose link is cut
// after a checkpoint is left out once host_wait is spent: the next
// attempt runs 4 ranks on the 2 hosts left (WORLD_SIZE 4), resumed from
// the newest checkpoint and told the world changed. Once the link is
// back, the next restart (a rank SIGKILLed) takes the host back in: 6
// ranks again, and the run finishes.
func TestRunShrinksAndGrowsBack(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 3, Job: "procs_per_host = 2\nmin_hosts = 2\nhost_wait = \"3s\"\nmax_restarts = 3", Script: `
echo "start rank=$RANK world=$WORLD_SIZE restart=$DROVER_RESTART_COUNT changed=[$DROVER_WORLD_CHANGED] prev=[$DROVER_PREV_WORLD_SIZE] resume=[${DROVER_RESUME_FROM##*/}]"
case "$DROVER_RESTART_COUNT" in
0)
	if [ "$RANK" = 0 ]; then
		mkdir -p "$DROVER_CHECKPOINT_DIR"
		echo 60 > "$DROVER_CHECKPOINT_DIR/.step-60" && mv "$DROVER_CHECKPOINT_DIR/.step-60" "$DROVER_CHECKPOINT_DIR/step-60"
	fi
	sleep 1000;;
1)
	if [ "$RANK" = 0 ]; then
		while [ ! -e kill-me ]; do sleep 0.2; done
		kill -9 $$
	fi
	sleep 1000;;
esac
echo "done rank=$RANK"
`})
	d := startDrover(t, j)
	start := func(restart int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^\[worker-\d@\S+\] start rank=(\d) world=(\d) restart=%d changed=\[(.*)\] prev=\[(.*)\] resume=\[(.*)\]$`, restart))
	}
	d.waitLines(t, start(0), 6, 60*time.Second)
	testenv.Wait(t, 30*time.Second, "the checkpoint copied", func() (bool, string) {
		return strings.Contains(d.stderr.String(), "checkpoint step-60 (#1"), d.stderr.String()
	})
	require.NoError(t, fleet.Cut(2))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(2))
		}
	})
	second := d.waitLines(t, start(1), 4, 90*time.Second)
	for _, m := range second {
		assert.Equal(t, []string{"4", "1", "6", "step-60"}, m[2:], "rank %s of the shrunk group", m[1])
	}
	stderr := d.stderr.String()
	assert.Regexp(t, `attempt 2/\d+: going on without `+regexp.QuoteMeta(fleet.Hosts[2].Name)+` \(unreachable for host_wait 3s and no spare left: .*\): 2 of 3 hosts, min_hosts = 2`, stderr)
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" left out of the group: world size 6 -> 4")
	assert.Empty(t, jobProcs(t, j.Name, 2), "nothing runs on the host left out")

	require.NoError(t, fleet.Heal(2))
	healed = true
	out, err := fleet.Exec(0, "touch", hostHome+"/"+j.Workdir+"/kill-me")
	require.NoError(t, err, "%s", out)
	third := d.waitLines(t, start(2), 6, 90*time.Second)
	for _, m := range third {
		assert.Equal(t, []string{"6", "1", "4", "step-60"}, m[2:], "rank %s of the group grown back", m[1])
	}
	require.Equal(t, 0, d.wait(t, 60*time.Second), "stderr:\n%s", d.stderr.String())
	stderr = d.stderr.String()
	assert.Contains(t, stderr, hostLabel(2)+" answers again: it rejoins the group")
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" rejoined the group: world size 4 -> 6")
	assert.Contains(t, j.logFile(t, 3, "worker-5"), "done rank=5\n", "the host grown back runs ranks 4 and 5")
}

// Issue 41: with regrow = "checkpoint", a host left out that answers
// again is taken back right after the next new checkpoint, with no
// failure: the shrunk group is stopped and restarted on 6 ranks, resumed
// from that checkpoint, and no restart is spent on it.
func TestRunRegrowsAfterCheckpoint(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 3, Job: "procs_per_host = 2\nmin_hosts = 2\nregrow = \"checkpoint\"\nhost_wait = \"3s\"\nmax_restarts = 0\nmax_host_failures = 1", Script: `
echo "start rank=$RANK world=$WORLD_SIZE restart=$DROVER_RESTART_COUNT changed=[$DROVER_WORLD_CHANGED] prev=[$DROVER_PREV_WORLD_SIZE] resume=[${DROVER_RESUME_FROM##*/}]"
save() {
	mkdir -p "$DROVER_CHECKPOINT_DIR"
	echo "$1" > "$DROVER_CHECKPOINT_DIR/.step-$1" && mv "$DROVER_CHECKPOINT_DIR/.step-$1" "$DROVER_CHECKPOINT_DIR/step-$1"
}
case "$DROVER_RESTART_COUNT" in
0)
	if [ "$RANK" = 0 ]; then save 60; fi
	sleep 1000;;
1)
	if [ "$RANK" = 0 ]; then
		while [ ! -e save-now ]; do sleep 0.2; done
		save 120
	fi
	sleep 1000;;
esac
echo "done rank=$RANK"
`})
	d := startDrover(t, j)
	start := func(restart int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^\[worker-\d@\S+\] start rank=(\d) world=(\d) restart=%d changed=\[(.*)\] prev=\[(.*)\] resume=\[(.*)\]$`, restart))
	}
	d.waitLines(t, start(0), 6, 60*time.Second)
	testenv.Wait(t, 30*time.Second, "the checkpoint copied", func() (bool, string) {
		return strings.Contains(d.stderr.String(), "checkpoint step-60 (#1"), d.stderr.String()
	})
	require.NoError(t, fleet.Cut(2))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(2))
		}
	})
	for _, m := range d.waitLines(t, start(1), 4, 90*time.Second) {
		assert.Equal(t, []string{"4", "1", "6", "step-60"}, m[2:], "rank %s of the shrunk group", m[1])
	}
	require.NoError(t, fleet.Heal(2))
	healed = true
	// The host answers; the group is taken back only after the next
	// checkpoint (it resumes from step-120, not step-60).
	out, err := fleet.Exec(0, "touch", hostHome+"/"+j.Workdir+"/save-now")
	require.NoError(t, err, "%s", out)
	for _, m := range d.waitLines(t, start(2), 6, 90*time.Second) {
		assert.Equal(t, []string{"6", "1", "4", "step-120"}, m[2:], "rank %s of the group grown back", m[1])
	}
	require.Equal(t, 0, d.wait(t, 60*time.Second), "stderr:\n%s", d.stderr.String())
	stderr := d.stderr.String()
	assert.Regexp(t, `attempt 2/2: `+regexp.QuoteMeta(fleet.Hosts[2].Name)+` answers again and a new checkpoint is complete: restarting the group to take it back \(regrow = "checkpoint"\); stopping 4 process\(es\)`, stderr)
	assert.Contains(t, stderr, "attempt 3/3: restarting the whole group in 0s", "no backoff, and no restart spent: max_restarts = 0 still let the run finish")
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" rejoined the group: world size 4 -> 6")
	assert.Contains(t, stderr, "attempt 3/3: job "+j.Name+" succeeded")
}
