package main

// Fleet tests of issue 21 item 3: two `drover run`s never destroy each
// other. The real drover binary runs twice as controller against the real
// sshd fleet; the second run of a workdir that a live run holds refuses
// before it touches anything, --force takes over, and a run whose
// controller was SIGKILLed is a leftover the next run cleans up.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/fleettest"
)

var readyRE = regexp.MustCompile(`(?m)^\[worker-\d@\S+\] ready rank=\d$`)

// otherJob is a second job named name with j's inventory and workdir but
// its own code directory (holding only other.sh), job file and logs.
func otherJob(t *testing.T, j *fleetJob, name string) *fleetJob {
	t.Helper()
	dir := t.TempDir()
	o := &fleetJob{Name: name, Dir: dir, Path: filepath.Join(dir, "job.toml"), Inventory: j.Inventory, Workdir: j.Workdir, LogRoot: filepath.Join(dir, "runs")}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "home"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code", "other.sh"), []byte("echo other job ran\n"), 0o644))
	require.NoError(t, os.WriteFile(o.Path, []byte(fmt.Sprintf(`inventory = %q

[job]
name = %q
framework = "pytorch"
command = ["sh", "other.sh"]
code = "code"
workdir = %q
stop_grace = "2s"
`, j.Inventory, name, j.Workdir)), 0o644))
	return o
}

func pidsOf(procs []hostProc) []int {
	var out []int
	for _, p := range procs {
		out = append(out, p.Pid)
	}
	sort.Ints(out)
	return out
}

// leaseOn says whether host i has a lease in j's workdir.
func leaseOn(i int, j *fleetJob) bool {
	_, err := fleet.Exec(i, "test", "-L", path.Join(hostHome, j.Workdir, ".drover/lease"))
	return err == nil
}

// TestRunRefusesWhileAnotherRunLives: a second run of the same job, and a
// run of another job with the same workdir, refuse with exit 2 and a
// message naming the live controller, and change nothing: the first run's
// processes and code are untouched.
func TestRunRefusesWhileAnotherRunLives(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: sleepForever})
	first := startDrover(t, j)
	first.waitLines(t, readyRE, 2, 60*time.Second)
	before := pidsOf(jobProcs(t, j.Name))
	require.Len(t, before, 2*3, "agent, sh and sleep on each host")
	ctl, err := os.Hostname()
	require.NoError(t, err)

	other := otherJob(t, j, "other-job")
	for _, second := range []*fleetJob{j, other} {
		d := startDrover(t, second)
		require.Equal(t, exitConfig, d.wait(t, 60*time.Second), "second run of %s; stderr:\n%s", second.Name, d.stderr.String())
		stderr := d.stderr.String()
		assert.Contains(t, stderr, fmt.Sprintf("drover: workdir %s/%s on %s, %s is in use by the drover run of job %q (controller %s, pid %d, run id ",
			hostHome, j.Workdir, fleet.Hosts[0].Name, fleet.Hosts[1].Name, j.Name, ctl, first.cmd.Process.Pid), second.Name)
		assert.Contains(t, stderr, "pass --force to take over", second.Name)
		assert.NotContains(t, stderr, "leftover", second.Name)
		assert.NotContains(t, stderr, "pushed", second.Name)
		assert.NotContains(t, d.stdout.String(), "other job ran")
	}
	select {
	case <-first.done:
		t.Fatalf("the first run ended (%d):\n%s", first.code, first.stderr.String())
	default:
	}
	assert.Equal(t, before, pidsOf(jobProcs(t, j.Name)), "the first run's processes are the same ones")
	for i := range 2 {
		_, err := hostFile(t, i, path.Join(j.Workdir, "w.sh"))
		assert.NoError(t, err, "%s: the first run's code is still there", fleet.Hosts[i].Name)
	}
	assert.NotContains(t, first.stderr.String(), "leftover")
	assert.NotContains(t, first.stderr.String(), "exited")

	first.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, first.wait(t, 30*time.Second))
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
	// Now the other job may use the workdir.
	d := startDrover(t, other)
	require.Equal(t, 0, d.wait(t, 60*time.Second), d.stderr.String())
	assert.Contains(t, d.stdout.String(), "[worker-0@"+fleet.Hosts[0].Name+"] other job ran\n")
}

// TestRunForceTakesOver: --force takes a live run's workdir; that run
// says who took it, stops and exits 1, and the new run runs.
func TestRunForceTakesOver(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: sleepForever})
	first := startDrover(t, j)
	first.waitLines(t, readyRE, 2, 60*time.Second)
	old := pidsOf(jobProcs(t, j.Name))

	second := startDrover(t, j, "--force")
	require.Equal(t, exitFailed, first.wait(t, 60*time.Second), first.stderr.String())
	assert.Regexp(t, `\S+: the drover run of job "`+j.Name+fmt.Sprintf(`" \(controller [^,]+, pid %d, run id [0-9a-f]+, since [^)]+\) took over workdir %s/%s \(--force\); stopping this run without restarting`, second.cmd.Process.Pid, hostHome, j.Workdir), first.stderr.String())
	second.waitLines(t, readyRE, 2, 60*time.Second)
	assert.Contains(t, second.stderr.String(), fmt.Sprintf("%s: taking over workdir %s/%s from the drover run of job %q", fleet.Hosts[0].Name, hostHome, j.Workdir, j.Name))
	now := pidsOf(jobProcs(t, j.Name))
	assert.Len(t, now, 2*3)
	for _, p := range old {
		assert.NotContains(t, now, p, "the first run's processes are gone")
	}
	second.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, second.wait(t, 30*time.Second))
	waitNoJobProcs(t, j.Name, 5*time.Second)
}

// TestRunTakesOverFromKilledController: the lease of a SIGKILLed
// controller stops being renewed; the next run sees that, takes the
// workdir and stops what is left of the old group.
func TestRunTakesOverFromKilledController(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: sleepForever})
	first := startDrover(t, j)
	first.waitLines(t, readyRE, 2, 60*time.Second)
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	require.True(t, leaseOn(0, j), "a SIGKILLed controller leaves its lease")

	second := startDrover(t, j)
	second.waitLines(t, readyRE, 2, 60*time.Second)
	stderr := second.stderr.String()
	assert.Regexp(t, fmt.Sprintf(`%s: the lease of the drover run of job "%s" \(controller [^,]+, pid %d, run id [0-9a-f]+, since [^)]+\) on workdir %s/%s was not renewed for \S+: that controller is gone`,
		fleet.Hosts[0].Name, j.Name, first.cmd.Process.Pid, hostHome, j.Workdir), stderr)
	assert.NotContains(t, stderr, "in use by")
	second.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, second.wait(t, 30*time.Second))
	waitNoJobProcs(t, j.Name, 5*time.Second)
	assert.False(t, strings.Contains(second.stderr.String(), "killing"), "stopped within the grace period")
}
