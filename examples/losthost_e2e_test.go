package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lostHostJob is a fleet job over all four fleet hosts, the last a spare,
// with host_wait = "2s" (issue 15's lost-host case). Each step sleeps
// longer than the other fleet jobs', which leaves time to cut a host
// after a checkpoint was copied; the sleep does not change the result.
func lostHostJob(t *testing.T) *fleetJob {
	t.Helper()
	j := newFleetJob(t, "pytorch")
	job, err := os.ReadFile(j.jobPath())
	require.NoError(t, err)
	text := strings.Replace(string(job), "max_restarts = 2\n", "max_restarts = 2\nhost_wait = \"2s\"\n", 1)
	text = strings.Replace(text, fmt.Sprintf("%q]", stepSleep), `"0.3"]`, 1)
	require.Contains(t, text, `"0.3"]`)
	require.NoError(t, os.WriteFile(j.jobPath(), []byte(text), 0o644))

	hosts := fleet.ClusterHosts()
	require.GreaterOrEqual(t, len(hosts), fleetHosts+1)
	var b strings.Builder
	fmt.Fprintf(&b, "[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for i, h := range hosts[:fleetHosts+1] {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\n", h.Name, h.Address)
		if i == fleetHosts {
			b.WriteString("spare = true\n")
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(j.dir, "inventory.toml"), []byte(b.String()), 0o644))
	return j
}

// waitEvent waits for a line of drover's events matching re and returns
// its submatches.
func waitEvent(t *testing.T, r *droverRun, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	testenv.Wait(t, checkpointTimeout, fmt.Sprintf("an event %q", re), func() (bool, string) {
		if m = re.FindStringSubmatch(r.events(t)); m != nil {
			return true, ""
		}
		if r.finished() {
			t.Fatalf("drover exited before %q; output:\n%s", re, r.output())
		}
		return false, "output:\n" + r.output()
	})
	return m
}

// TestFleetLostHost: rank 0's host, the only one that writes checkpoints,
// loses its link for good after the step-20 checkpoint (drover has copied
// it to another host). The spare takes its place; rank 0 resumes there
// from drover's copy, a checkpoint its new host never wrote, and training
// ends with the parameters of an undisturbed run.
func TestFleetLostHost(t *testing.T) {
	needFleet(t)
	want := runUndisturbed(t, "pytorch")

	const lost, spare = 0, fleetHosts
	j := lostHostJob(t)
	logDir := filepath.Join(j.dir, "runs")
	r := startDrover(t, j.dir, "run", "--quiet", "--log-dir", logDir, j.jobPath())

	copied := regexp.MustCompile(`attempt 1/3: checkpoint step-0000([2-9]0)\.pt \(#\d+, [^)]*\) copied from ` +
		regexp.QuoteMeta(fleet.Hosts[lost].Name) + ` to \[(\S+)\]`)
	m := waitEvent(t, r, copied)
	t.Logf("step %s copied to %s; cutting %s off", m[1], m[2], fleet.Hosts[lost].Name)
	require.NoError(t, fleet.Cut(lost))
	t.Cleanup(func() {
		if err := fleet.Heal(lost); err != nil {
			t.Errorf("heal %s: %v", fleet.Hosts[lost].Name, err)
		}
	})

	code := r.wait(t)
	events := r.events(t)
	require.Equal(t, 0, code, "drover exit status; output:\n%s", r.output())
	assert.Contains(t, events, "replaced by spare "+fleet.Hosts[spare].Name)

	run := runDir(t, logDir)
	as := attempts(t, run)
	last := as[len(as)-1]
	rank0 := readLog(t, filepath.Join(run, last, "worker-0.log"))
	assert.Regexp(t, `(?m)^rank 0/6 local_rank 0 on `+fleet.Hosts[spare].Name+` restart=\d+$`, rank0, "rank 0 runs on the spare")
	res := resumedRE.FindStringSubmatch(rank0)
	require.NotNil(t, res, "rank 0 did not resume from a checkpoint:\n%s", rank0)
	step, err := strconv.Atoi(res[2])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, step, 20, "resumed from step %d", step)
	// The path is drover's copy on the spare: the spare never wrote it.
	home := "/home/" + fleet.User + "/" + j.workdir
	assert.Regexp(t, `^`+regexp.QuoteMeta(home+"/.drover/checkpoints/")+`\d{6}/step-\d{6}\.pt$`, res[1])
	out, err := fleet.Exec(spare, "sha256sum", res[1])
	require.NoError(t, err, "the checkpoint rank 0 resumed from is on its own host")
	t.Logf("on %s: %s", fleet.Hosts[spare].Name, out)
	assert.Equal(t, want, finalHash(t, rank0), "params after losing rank 0's host differ from an undisturbed run's")

	// drover checkpoints lists what it saw, and who holds it.
	list := droverOutput(t, j.dir, "checkpoints", "--log-dir", logDir, j.jobPath())
	assert.Contains(t, list, fmt.Sprintf("step-%06d.pt", step))
	assert.Contains(t, list, fleet.Hosts[spare].Name+" (copy)")
	t.Logf("drover checkpoints:\n%s", list)

	assertNoLeftovers(t, j)
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
}

// droverOutput runs the drover binary to completion and returns its stdout.
func droverOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	r := startDrover(t, dir, args...)
	require.Equal(t, 0, r.wait(t), "drover %v: %s", args, r.output())
	b, err := os.ReadFile(r.stdout)
	require.NoError(t, err)
	return string(b)
}
