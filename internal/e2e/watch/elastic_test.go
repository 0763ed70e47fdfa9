package watch

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
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
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Job: "procs_per_host = 2\nmin_hosts = 2\nhost_wait = \"3s\"\nmax_restarts = 3", Script: `
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
	d := kit.StartDrover(t, j)
	start := elasticStart
	heal := cutAfterStep60(t, d)
	second := d.WaitLines(t, start(1), 4, 90*time.Second)
	for _, m := range second {
		assert.Equal(t, []string{"4", "1", "6", "step-60"}, m[2:], "rank %s of the shrunk group", m[1])
	}
	stderr := d.Stderr.String()
	assert.Regexp(t, `attempt 2/\d+: going on without `+regexp.QuoteMeta(fleet.Hosts[2].Name)+` \(unreachable for host_wait 3s and no spare left: .*\): 2 of 3 hosts, min_hosts = 2`, stderr)
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" left out of the group: world size 6 -> 4")
	assert.Empty(t, kit.JobProcs(t, j.Name, 2), "nothing runs on the host left out")

	heal()
	out, err := fleet.Exec(0, "touch", kit.HostHome+"/"+j.Workdir+"/kill-me")
	require.NoError(t, err, "%s", out)
	third := d.WaitLines(t, start(2), 6, 90*time.Second)
	for _, m := range third {
		assert.Equal(t, []string{"6", "1", "4", "step-60"}, m[2:], "rank %s of the group grown back", m[1])
	}
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr = d.Stderr.String()
	assert.Contains(t, stderr, kit.HostLabel(2)+" answers again: it rejoins the group")
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" rejoined the group: world size 4 -> 6")
	assert.Contains(t, j.LogFile(t, 3, "worker-5"), "done rank=5\n", "the host grown back runs ranks 4 and 5")
}

// Issue 41: with regrow = "checkpoint", a host left out that answers
// again is taken back right after the next new checkpoint, with no
// failure: the shrunk group is stopped and restarted on 6 ranks, resumed
// from that checkpoint, and no restart is spent on it.
func TestRunRegrowsAfterCheckpoint(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Job: "procs_per_host = 2\nmin_hosts = 2\nregrow = \"checkpoint\"\nhost_wait = \"3s\"\nmax_restarts = 0\nmax_host_failures = 1", Script: `
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
	d := kit.StartDrover(t, j)
	start := elasticStart
	heal := cutAfterStep60(t, d)
	for _, m := range d.WaitLines(t, start(1), 4, 90*time.Second) {
		assert.Equal(t, []string{"4", "1", "6", "step-60"}, m[2:], "rank %s of the shrunk group", m[1])
	}
	heal()
	// The host answers; the group is taken back only after the next
	// checkpoint (it resumes from step-120, not step-60).
	out, err := fleet.Exec(0, "touch", kit.HostHome+"/"+j.Workdir+"/save-now")
	require.NoError(t, err, "%s", out)
	for _, m := range d.WaitLines(t, start(2), 6, 90*time.Second) {
		assert.Equal(t, []string{"6", "1", "4", "step-120"}, m[2:], "rank %s of the group grown back", m[1])
	}
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Regexp(t, `attempt 2/2: `+regexp.QuoteMeta(fleet.Hosts[2].Name)+` answers again and a new checkpoint is complete: restarting the group to take it back \(regrow = "checkpoint"\); stopping 4 process\(es\)`, stderr)
	assert.Contains(t, stderr, "attempt 3/3: restarting the whole group in 0s", "no backoff, and no restart spent: max_restarts = 0 still let the run finish")
	assert.Contains(t, stderr, fleet.Hosts[2].Name+" rejoined the group: world size 4 -> 6")
	assert.Contains(t, stderr, "attempt 3/3: job "+j.Name+" succeeded")
}

// Issue 41, sharded checkpoints across a world change: 3 hosts x 2 ranks
// each write their own shard of step-60 (DCP's names; .metadata from rank
// 0 once all six are written), and host 2 is cut once drover copied its
// part to another host. The 4-rank attempt on the 2 hosts left resumes
// with every one of the 6 shards readable on both hosts (the union drover
// stages), and what each rank computes from them is what the 6 shards
// hold.
func TestRunShrinksWithShardedCheckpoint(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Job: "procs_per_host = 2\nmin_hosts = 2\nhost_wait = \"3s\"\ncheckpoint_layout = \"sharded\"", Script: `
echo "start rank=$RANK world=$WORLD_SIZE restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	d="$DROVER_CHECKPOINT_DIR/step-60"
	mkdir -p "$d"
	echo "$((RANK * 10 + 1))" > "$DROVER_CHECKPOINT_DIR/.shard-$RANK" && mv "$DROVER_CHECKPOINT_DIR/.shard-$RANK" "$d/__${RANK}_0.distcp"
	if [ "$RANK" = 0 ]; then
		while [ ! -e write-metadata ]; do sleep 0.2; done
		echo meta > "$DROVER_CHECKPOINT_DIR/.meta" && mv "$DROVER_CHECKPOINT_DIR/.meta" "$d/.metadata"
	fi
	exec sleep 1000
fi
n=0; sum=0
for f in "$DROVER_RESUME_FROM"/__*_0.distcp; do n=$((n + 1)); sum=$((sum + $(cat "$f"))); done
echo "rank=$RANK world=$WORLD_SIZE changed=$DROVER_WORLD_CHANGED loaded $n shards sum=$sum from=${DROVER_RESUME_FROM##*/}"
`})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d world=6 restart=0$`), 6, 60*time.Second)
	// Every shard is on its host before rank 0 writes the marker, as
	// DCP's barrier makes sure.
	for i := range 3 {
		testenv.Wait(t, 20*time.Second, fmt.Sprintf("both shards on host %d", i), func() (bool, string) {
			out, err := fleet.Exec(i, "sh", "-c", fmt.Sprintf("ls %s/%s/checkpoints/step-60", kit.HostHome, j.Workdir))
			return err == nil && strings.Count(string(out), ".distcp") == 2, string(out)
		})
	}
	out, err := fleet.Exec(0, "touch", kit.HostHome+"/"+j.Workdir+"/write-metadata")
	require.NoError(t, err, "%s", out)
	lost := fleet.Hosts[2].Name
	testenv.Wait(t, 30*time.Second, lost+"'s part copied", func() (bool, string) {
		return regexp.MustCompile(regexp.QuoteMeta(lost) + `'s part of checkpoint step-60 \(#1, [^)]*\) copied to \[\S+\]`).MatchString(d.Stderr.String()), d.Stderr.String()
	})
	require.NoError(t, fleet.Cut(2))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(2)) })

	require.Equal(t, 0, d.Wait(t, 90*time.Second), "stderr:\n%s", d.Stderr.String())
	loaded := regexp.MustCompile(`(?m)^\[worker-\d@(\S+)\] rank=(\d) world=(\d) changed=(\d) loaded (\d+) shards sum=(\d+) from=(\S+)$`).FindAllStringSubmatch(d.Stdout.String(), -1)
	require.Len(t, loaded, 4, "stdout:\n%s", d.Stdout.String())
	for _, m := range loaded {
		assert.NotEqual(t, lost, m[1])
		// 1 + 11 + 21 + 31 + 41 + 51
		assert.Equal(t, []string{"4", "1", "6", "156", "step-60"}, m[3:], "rank %s on %s", m[2], m[1])
	}
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "going on without "+lost)
	assert.Regexp(t, `resuming from sharded checkpoint step-60 \(#1, seen \S+, parts of [^)]*`+regexp.QuoteMeta(lost)+`[^)]*\): .*staged .*`+regexp.QuoteMeta(lost)+`'s part onto `, stderr)
}

// Issue 41, TensorFlow: a chief and 3 workers, one task a host; the
// host of worker 2 is lost with min_hosts = 3 and no spare: the job goes
// on with the chief and 2 workers, TF_CONFIG naming only them.
func TestRunTensorFlowShrinksWorkers(t *testing.T) {
	fleettest.Need(t, fleet)
	require.GreaterOrEqual(t, len(fleet.ClusterHosts()), 4)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 4, Job: "framework = \"tensorflow\"\nmin_hosts = 3\nhost_wait = \"3s\"\n\n[job.roles]\nchief = 1\nworker = 3", Script: `
echo "task=$DROVER_ROLE-$DROVER_INDEX restart=$DROVER_RESTART_COUNT changed=[$DROVER_WORLD_CHANGED] prev=[$DROVER_PREV_WORLD_SIZE] tf=$TF_CONFIG"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then exec sleep 1000; fi
`})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[\S+\] task=\S+ restart=0 `), 4, 60*time.Second)
	require.NoError(t, fleet.Cut(3))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(3)) })
	require.Equal(t, 0, d.Wait(t, 90*time.Second), "stderr:\n%s", d.Stderr.String())
	second := regexp.MustCompile(`(?m)^\[(\S+)@(\S+)\] task=(\S+) restart=1 changed=\[1\] prev=\[4\] tf=(.*)$`).FindAllStringSubmatch(d.Stdout.String(), -1)
	require.Len(t, second, 3, "stdout:\n%s", d.Stdout.String())
	var tasks []string
	for _, m := range second {
		tasks = append(tasks, m[3]+"@"+m[2])
		assert.Contains(t, m[4], `"worker":["`+fleet.Hosts[1].Addr+`:2222","`+fleet.Hosts[2].Addr+`:2222"]`)
		assert.NotContains(t, m[4], fleet.Hosts[3].Addr)
	}
	assert.ElementsMatch(t, []string{"chief-0@" + fleet.Hosts[0].Name, "worker-0@" + fleet.Hosts[1].Name, "worker-1@" + fleet.Hosts[2].Name}, tasks)
	assert.Contains(t, d.Stderr.String(), fleet.Hosts[3].Name+" left out of the group: world size 4 -> 3")
}

// elasticStart matches the start line every rank of attempt restart+1
// prints: rank, world size, DROVER_WORLD_CHANGED, DROVER_PREV_WORLD_SIZE
// and DROVER_RESUME_FROM's checkpoint.
func elasticStart(restart int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^\[worker-\d@\S+\] start rank=(\d) world=(\d) restart=%d changed=\[(.*)\] prev=\[(.*)\] resume=\[(.*)\]$`, restart))
}

// cutAfterStep60 waits for the 6 ranks of the first attempt and the copy
// of their step-60 checkpoint, then cuts the third host's link; heal
// restores it (once; the test's cleanup heals a link still cut).
func cutAfterStep60(t *testing.T, d *kit.DroverProc) (heal func()) {
	t.Helper()
	d.WaitLines(t, elasticStart(0), 6, 60*time.Second)
	testenv.Wait(t, 30*time.Second, "the checkpoint copied", func() (bool, string) {
		return strings.Contains(d.Stderr.String(), "checkpoint step-60 (#1"), d.Stderr.String()
	})
	require.NoError(t, fleet.Cut(2))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(2))
		}
	})
	return func() {
		require.NoError(t, fleet.Heal(2))
		healed = true
	}
}
