package e2e

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// Issue 37, item 3: starting over is explicit. After a successful run,
// a second `drover run` resumes from its checkpoint and says so, naming
// the run and --fresh; `drover run --fresh` gives the processes no
// DROVER_RESUME_FROM, leaves the user's checkpoint_dir as it is and sets
// drover's copies aside rather than deleting them; the run after it
// resumes from the checkpoint the fresh run saved.
func TestRunResumesSayingSoAndFreshStartsOver(t *testing.T) {
	fleettest.Need(t, fleet)
	// Rank 0 saves step-1 (temp name, rename) with content of its own per
	// run, and lives long enough for drover to see it complete.
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Job: "checkpoint_copies = 2", Script: `
echo "resume=[$DROVER_RESUME_FROM] rank=$RANK"
if [ "$RANK" = 0 ]; then
	mkdir -p "$DROVER_CHECKPOINT_DIR"
	date +%s%N > "$DROVER_CHECKPOINT_DIR/.step-1.tmp" && mv "$DROVER_CHECKPOINT_DIR/.step-1.tmp" "$DROVER_CHECKPOINT_DIR/step-1"
fi
sleep 5
`})
	run := func(args ...string) *kit.DroverProc {
		t.Helper()
		d := kit.StartDrover(t, j, args...)
		require.Equal(t, 0, d.Wait(t, 90*time.Second), "stderr:\n%s", d.Stderr.String())
		return d
	}
	resumeRE := regexp.MustCompile(`(?m)^\[worker-(\d)@\S+\] resume=\[(.*)\] rank=\d$`)
	resumes := func(d *kit.DroverProc) map[string]string {
		out := map[string]string{}
		for _, m := range resumeRE.FindAllStringSubmatch(d.Stdout.String(), -1) {
			out[m[1]] = m[2]
		}
		return out
	}
	newestRun := func() string {
		dirs, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*"))
		require.NoError(t, err)
		require.NotEmpty(t, dirs)
		return filepath.Base(dirs[len(dirs)-1])
	}

	first := run()
	assert.Equal(t, map[string]string{"0": "", "1": ""}, resumes(first))
	firstRun := newestRun()
	saved, err := kit.HostFile(t, 0, path.Join(j.Workdir, "checkpoints/step-1"))
	require.NoError(t, err)

	second := run()
	assert.Contains(t, second.Stderr.String(), "attempt 1/4: resuming checkpoint step-1 from run "+firstRun+"; drover run --fresh starts over\n")
	for rank, p := range resumes(second) {
		assert.Regexp(t, `/step-1$`, p, "rank %s resumes", rank)
	}

	fresh := run("--fresh")
	stderr := fresh.Stderr.String()
	assert.Equal(t, map[string]string{"0": "", "1": ""}, resumes(fresh), "no DROVER_RESUME_FROM with --fresh")
	assert.Regexp(t, `attempt 1/4: starting from scratch \(--fresh\): no DROVER_RESUME_FROM; drover's copies of older checkpoints set aside under \.drover/set-aside/\S+ on each host`, stderr)
	assert.NotContains(t, stderr, "resuming")
	// Host 1's copies of the earlier runs' step-1 are set aside, not deleted.
	out, err := fleet.Exec(1, "sh", "-c", fmt.Sprintf("cat %s/%s/.drover/set-aside/*/checkpoints/*/step-1", kit.HostHome, j.Workdir))
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), saved, "the first run's step-1 among them")
	freshRun := newestRun()

	third := run()
	assert.Contains(t, third.Stderr.String(), "resuming checkpoint step-1 from run "+freshRun+"; drover run --fresh starts over\n")
}
