package e2e

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// A log kept beside the code (issue 37): with code = "." and the job file
// in the code directory, `drover run job.toml 2>&1 | tee run.log` pushes
// a run.log that changes while it is pushed, the job's lines (here with a
// ticker's, so that it changes all through the push, as a job printing
// continuously makes it) and drover's own. Five runs in a row succeed, each
// with at most one warning naming run.log (not one per host); runs/ (the
// default log directory, in the code directory) is never pushed; and
// drover's own stdout redirected into the code directory (`> out.log`) is
// not pushed at all.
func TestRunLogBesideCode(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2,
		Script: `i=0; while [ $i -lt 20 ]; do echo "rank=$RANK line $i"; i=$((i+1)); sleep 0.02; done`})
	code := filepath.Join(j.Dir, "code")
	text, err := os.ReadFile(j.Path)
	require.NoError(t, err)
	job := strings.Replace(string(text), `code = "code"`, `code = "."`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(code, "job.toml"), []byte(job), 0o644))

	// $1: the code directory, $2: drover.
	tee := `set -o pipefail; cd "$1" && { (while :; do echo "tick $(date +%s%N)"; sleep 0.005; done) & tick=$!; "$2" run job.toml; rc=$?; kill $tick; exit $rc; } 2>&1 | tee run.log`
	warned := regexp.MustCompile(`warning: .*run\.log.*`)
	for i := range 5 {
		d := kit.StartDroverWrapped(t, j, []string{"bash", "-c", tee, "bash", code})
		rc := d.Wait(t, 90*time.Second)
		out := d.Stdout.String()
		require.Equal(t, 0, rc, "run %d of 5:\n%s", i+1, kit.Tail(out, 3000))
		assert.LessOrEqual(t, kit.CountLines(out, warned), 1, "run %d: one warning naming run.log at most:\n%s", i+1, out)
		if m := warned.FindString(out); m != "" {
			assert.Contains(t, m, "exclude", "the warning says the fix")
			assert.Contains(t, m, ".droverignore")
		}
		log, err := os.ReadFile(filepath.Join(code, "run.log"))
		require.NoError(t, err)
		assert.Contains(t, string(log), "rank=1 line 19", "run %d: the job's lines are in the log", i+1)
	}
	for h := range 2 {
		_, err := fleet.Exec(h, "test", "!", "-e", path.Join(kit.HostHome, j.Workdir, "runs"))
		assert.NoError(t, err, "runs/ was pushed to %s", fleet.Hosts[h].Name)
	}

	own := `cd "$1" && exec "$2" run job.toml >out.log 2>&1`
	d := kit.StartDroverWrapped(t, j, []string{"bash", "-c", own, "bash", code})
	rc := d.Wait(t, 90*time.Second)
	out, _ := os.ReadFile(filepath.Join(code, "out.log"))
	require.Equal(t, 0, rc, "drover run > out.log:\n%s", out)
	for h := range 2 {
		_, err := fleet.Exec(h, "test", "!", "-e", path.Join(kit.HostHome, j.Workdir, "out.log"))
		assert.NoError(t, err, "drover's own output out.log was pushed to %s", fleet.Hosts[h].Name)
	}
}
