package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleetShardedLostHost (issue 27): 3 hosts x 2 ranks, every rank
// writing its own shard of each checkpoint (step-N/__<rank>_0.distcp,
// step-N/.metadata from rank 0 once all are written, DCP's layout) into
// its own host's checkpoint_dir, with checkpoint_layout = "sharded".
// Host 1 is cut off for good once drover copied its part of a checkpoint
// to another host. The spare takes its place and receives that part from
// the copy; every rank resumes from the same step-N with all six shards
// on its own host, and training ends with the parameters of an
// undisturbed run.
func TestFleetShardedLostHost(t *testing.T) {
	needFleet(t)
	want := runUndisturbed(t, "pytorch")

	const lost, spare = 1, fleetHosts
	j := lostHostJob(t)
	job, err := os.ReadFile(j.jobPath())
	require.NoError(t, err)
	text := strings.Replace(string(job), `"--sleep-per-step"`, `"--sharded", "--sleep-per-step"`, 1)
	text = strings.Replace(text, "checkpoint_dir = \"checkpoints\"\n", "checkpoint_dir = \"checkpoints\"\ncheckpoint_layout = \"sharded\"\n", 1)
	require.Contains(t, text, `checkpoint_layout = "sharded"`)
	require.Contains(t, text, `"--sharded"`)
	require.NoError(t, os.WriteFile(j.jobPath(), []byte(text), 0o644))
	logDir := filepath.Join(j.dir, "runs")
	r := startDrover(t, j.dir, "run", "--quiet", "--log-dir", logDir, j.jobPath())

	lostName := fleet.Hosts[lost].Name
	copied := regexp.MustCompile(`attempt 1/3: ` + regexp.QuoteMeta(lostName) +
		`'s part of checkpoint step-0000([1-9]0) \(#\d+, [^)]*\) copied to \[(\S+)\] in \S+ \(host to host`)
	m := waitEvent(t, r, copied)
	t.Logf("%s's part of step %s copied to %s; cutting %s off", lostName, m[1], m[2], lostName)
	require.NoError(t, fleet.Cut(lost))
	t.Cleanup(func() {
		if err := fleet.Heal(lost); err != nil {
			t.Errorf("heal %s: %v", lostName, err)
		}
	})

	code := r.wait(t)
	events := r.events(t)
	require.Equal(t, 0, code, "drover exit status; output:\n%s", r.output())
	assert.Contains(t, events, "replaced by spare "+fleet.Hosts[spare].Name)
	// The spare got the lost host's shards from their copy, host to host.
	assert.Regexp(t, `resuming from sharded checkpoint step-\d+ \(#\d+, seen \S+, parts of [^)]*\): .*staged .*`+
		regexp.QuoteMeta(lostName)+`'s part onto [^;]*`+regexp.QuoteMeta(fleet.Hosts[spare].Name), events)
	assert.Regexp(t, regexp.QuoteMeta(lostName)+`'s part of checkpoint step-\d+ \(#\d+, [^)]*\) copied to \[[^]]*`+
		regexp.QuoteMeta(fleet.Hosts[spare].Name)+`[^]]*\] in \S+ \(host to host`, events)

	run := runDir(t, logDir)
	as := attempts(t, run)
	last := as[len(as)-1]
	loaded := regexp.MustCompile(`(?m)^rank (\d) loaded (\d+) shards from (\S+)/(\d{6})/step-(\d{6})$`)
	home := "/home/" + fleet.User + "/" + j.workdir
	var step string
	for w := range fleetHosts * procsPerHst {
		out := readLog(t, filepath.Join(run, last, fmt.Sprintf("worker-%d.log", w)))
		got := loaded.FindStringSubmatch(out)
		require.NotNil(t, got, "worker %d did not resume from a sharded checkpoint:\n%s", w, out)
		assert.Equal(t, "6", got[2], "worker %d has every shard on its own host", w)
		assert.Equal(t, home+"/.drover/checkpoints", got[3], "worker %d resumes from the union drover staged", w)
		if step == "" {
			step = got[5]
		}
		assert.Equal(t, step, got[5], "every rank resumes from the same step")
	}
	n, err := strconv.Atoi(step)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 10)
	rank0 := readLog(t, filepath.Join(run, last, "worker-0.log"))
	assert.Equal(t, want, finalHash(t, rank0), "params after losing a host differ from an undisturbed run's")

	list := droverOutput(t, j.dir, "checkpoints", "--log-dir", logDir, j.jobPath())
	t.Logf("drover checkpoints:\n%s", list)
	assert.Contains(t, list, "3 parts, each held: recoverable")
	assertNoLeftovers(t, j)
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
}
