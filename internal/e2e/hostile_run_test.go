package e2e

// Fleet tests of a host that lies about the workdir's run, or whose login
// hangs (issue 36): adoption, status, stop and ps follow the run the
// hosts agree on, and a host that does not answer is named, not waited
// for.

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/runview"
)

// forgeRun rewrites host i's record of j's current run as a compromised
// login account could: a copy of it under dir (its processes' state
// records too, so that the run has live processes there), naming run id
// and updated long after the real one, and the workdir's current link
// pointing there.
func forgeRun(t *testing.T, j *kit.FleetJob, i int, dir, id string) {
	t.Helper()
	runs := kit.HostHome + "/" + j.Workdir + "/.drover/runs"
	script := `set -e; cd "$1"; real=$(readlink current); mkdir -p "$2"
sed -e "s|\"run_id\": \"$real\"|\"run_id\": \"$3\"|" -e 's|"updated": "[^"]*"|"updated": "2099-01-01T00:00:00Z"|' "$real/run.json" > "$2/run.json"
grep -q "$3" "$2/run.json"; cp -a "$real"/attempt-* "$2"/; ln -sfn "$2" current; chown -hR drovertest: current "$2"`
	out, err := fleet.Exec(i, "sh", "-c", script, "forge", runs, dir, id)
	require.NoError(t, err, "%s", out)
}

// restoreRun points host i's current link back at run id.
func restoreRun(t *testing.T, j *kit.FleetJob, i int, id string) {
	t.Helper()
	out, err := fleet.Exec(i, "sh", "-c", `cd "$1" && ln -sfn "$2" current && chown -h drovertest: current`, "restore",
		kit.HostHome+"/"+j.Workdir+"/.drover/runs", id)
	require.NoError(t, err, "%s", out)
}

// hangLogin makes every new login to host i sleep (bash with a .bashrc
// that sleeps, as a hung home directory would), until undone.
func hangLogin(t *testing.T, i int) (undo func()) {
	t.Helper()
	rc := filepath.Join(t.TempDir(), "bashrc")
	require.NoError(t, os.WriteFile(rc, []byte("sleep 30\n"), 0o644))
	out, err := fleet.Exec(i, "install", "-o", fleettest.User, "-m", "644", rc, kit.HostHome+"/.bashrc")
	require.NoError(t, err, "%s", out)
	require.NoError(t, fleet.SetLoginShell(i, "/bin/bash"))
	done := false
	undo = func() {
		if !done {
			done = true
			assert.NoError(t, fleet.SetLoginShell(i, ""))
			_, _ = fleet.Exec(i, "rm", "-f", kit.HostHome+"/.bashrc")
		}
	}
	t.Cleanup(undo)
	return undo
}

// One run of three hosts, then another: a host whose record names
// another run (a well-formed id updated later, or a path) is outvoted by
// the other two in status, adoption and stop, and a host whose login
// hangs is named by status, ps and stop instead of waited for.
func TestHostileRunRecord(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 3, Job: "max_restarts = 3"})
	h1, h2 := fleet.Hosts[1].Name, fleet.Hosts[2].Name
	sup := kit.StartDetachedRun(t, j)
	st := kit.WaitStatus(t, j, 30*time.Second, "3 running", func(st runview.RunStatus) bool { return kit.Running(st) == 3 })
	real := st.RunID

	// status: a later, well-formed record on one host is not followed.
	forgeRun(t, j, 2, "20990101-000000-f0f0f0", "20990101-000000-f0f0f0")
	st = kit.Status(t, j)
	assert.Equal(t, real, st.RunID, "status follows the run two hosts agree on, not h2's newer record")
	assert.Equal(t, 3, kit.Running(st), "h2's rank of the agreed run is still shown")
	assert.Equal(t, []string{h2 + " reports run 20990101-000000-f0f0f0"}, st.Dissent)
	restoreRun(t, j, 2, real)

	// adoption: a run id that is a path is nobody's run.
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	kit.WaitStatus(t, j, 30*time.Second, "unsupervised", func(st runview.RunStatus) bool { return !st.Supervisor.Alive })
	forgeRun(t, j, 1, "evil", "../../../../evil")
	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ := strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	assert.Contains(t, d.Stderr.String(), "adopting attempt 1 of run "+real)
	assert.Contains(t, d.Stderr.String(), h1+` reports a run id that is not drover's (../../../../evil)`)
	for i := range 3 {
		out, err := fleet.Exec(i, "sh", "-c", `ls -d "$1"/evil "$1"/drover-test/evil 2>/dev/null || true`, "ls", kit.HostHome)
		require.NoError(t, err)
		assert.Empty(t, strings.TrimSpace(string(out)), "host %d", i)
	}
	require.NoError(t, filepath.Walk(j.Dir, func(p string, _ os.FileInfo, err error) error {
		assert.NotEqual(t, "evil", filepath.Base(p), "the controller has no directory named by h1")
		return nil
	}))
	restoreRun(t, j, 1, real)
	st = kit.WaitStatus(t, j, 30*time.Second, "the adopted run supervised", func(st runview.RunStatus) bool { return st.Supervisor.Alive })
	assert.Equal(t, real, st.RunID)

	// A host whose login hangs: status and ps name it; stop stops the
	// others and exits non-zero naming it.
	undo := hangLogin(t, 2)
	start := time.Now()
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "status", j.Path, "--json", "--host-timeout", "3s")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, `"unreachable": [`+"\n"+`    "`+h2+`"`)
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "ps", "--inventory", j.Inventory, "--host-timeout", "3s")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errs, h2)
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path, "--host-timeout", "3s")
	assert.NotEqual(t, 0, code, "stop cannot say the run stopped on a host it did not reach")
	assert.Contains(t, errs, h2+" (")
	assert.Contains(t, errs, "did not answer within 3s")
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second, 0, 1)
	assert.Less(t, time.Since(start), 50*time.Second, "three commands, each bounded by its host timeout")
	undo()
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 90*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second)

	// stop: a later, well-formed record on one host is not followed; the
	// agreed run is stopped on every host, that one's rank included.
	kit.StartDetachedRun(t, j)
	st = kit.WaitStatus(t, j, 30*time.Second, "3 running", func(st runview.RunStatus) bool { return kit.Running(st) == 3 && st.RunID != real })
	forgeRun(t, j, 2, "20990101-000000-f1f1f1", "20990101-000000-f1f1f1")
	_, errs, code = kit.DroverIn(t, j, t.TempDir(), 90*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, h2+" reports run 20990101-000000-f1f1f1, not the run the other hosts agree on ("+st.RunID+"): not followed")
	assert.Contains(t, errs, "to stop run "+st.RunID)
	kit.WaitNoJobProcs(t, j.Name, 15*time.Second)
	// Before, stop stopped h2's rank alone and said so; the supervisor
	// then restarted the group.
	after := kit.Status(t, j)
	assert.Equal(t, st.RunID, after.RunID)
	assert.Equal(t, agent.RunStopped, after.State)
	assert.Equal(t, 0, after.Restarts)
}

// A stop while a new supervisor adopts the run (it waits out the gone
// one's lease; the record still names the gone one, so stop stops the
// group through its agents) ends the run: the adopter finds the group
// stopped and does not restart it.
func TestStopDuringAdoption(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.NumberedScript, Hosts: 2, Job: "max_restarts = 3"})
	sup := kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))
	kit.WaitStatus(t, j, 30*time.Second, "unsupervised", func(st runview.RunStatus) bool { return !st.Supervisor.Alive })

	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	d.WaitStderr(t, regexp.MustCompile(`watching its lease`), 30*time.Second)
	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	d.Wait(t, 60*time.Second)
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ := strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	st := kit.WaitStatus(t, j, 60*time.Second, "the run over", func(st runview.RunStatus) bool { return st.State.Final() && !st.Supervisor.Alive })
	assert.Equal(t, agent.RunStopped, st.State)
	assert.Equal(t, 0, st.Restarts, "the adopter restarted the group the stop had stopped")
	assert.Equal(t, 1, st.Attempt)
	var logs strings.Builder
	require.NoError(t, filepath.Walk(j.LogRoot, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".log") {
			b, _ := os.ReadFile(p)
			logs.Write(b)
		}
		return nil
	}))
	assert.NotContains(t, logs.String(), "restarting the whole group")
	kit.WaitNoJobProcs(t, j.Name, 15*time.Second)
}
