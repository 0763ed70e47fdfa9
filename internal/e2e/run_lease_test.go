package e2e

// Fleet tests of issue 21 item 3: two `drover run`s never destroy each
// other. The real drover binary runs twice as controller against the real
// sshd fleet; the second run of a workdir that a live run holds refuses
// before it touches anything, --force takes over, and a run whose
// controller was SIGKILLed is a leftover the next run cleans up.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
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

	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

var readyRE = regexp.MustCompile(`(?m)^\[worker-\d@\S+\] ready rank=\d$`)

// otherJob is a second job named name with j's inventory and workdir but
// its own code directory (holding only other.sh), job file and logs.
func otherJob(t *testing.T, j *kit.FleetJob, name string) *kit.FleetJob {
	t.Helper()
	dir := t.TempDir()
	o := &kit.FleetJob{Name: name, Dir: dir, Path: filepath.Join(dir, "job.toml"), Inventory: j.Inventory, Workdir: j.Workdir, LogRoot: filepath.Join(dir, "runs")}
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

func pidsOf(procs []kit.HostProc) []int {
	var out []int
	for _, p := range procs {
		out = append(out, p.Pid)
	}
	sort.Ints(out)
	return out
}

// leaseOn says whether host i has a lease in j's workdir.
func leaseOn(i int, j *kit.FleetJob) bool {
	_, err := fleet.Exec(i, "test", "-L", path.Join(kit.HostHome, j.Workdir, ".drover/lease"))
	return err == nil
}

// TestRunRefusesWhileAnotherRunLives: a second run of the same job, and a
// run of another job with the same workdir, refuse with exit 2 and a
// message naming the live controller, and change nothing: the first run's
// processes and code are untouched.
func TestRunRefusesWhileAnotherRunLives(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: kit.SleepForever})
	first := kit.StartDrover(t, j)
	first.WaitLines(t, readyRE, 2, 60*time.Second)
	before := pidsOf(kit.JobProcs(t, j.Name))
	require.Len(t, before, 2*3, "agent, sh and sleep on each host")
	ctl, err := os.Hostname()
	require.NoError(t, err)

	other := otherJob(t, j, "other-job")
	for _, second := range []*kit.FleetJob{j, other} {
		d := kit.StartDrover(t, second)
		require.Equal(t, kit.ExitConfig, d.Wait(t, 60*time.Second), "second run of %s; stderr:\n%s", second.Name, d.Stderr.String())
		stderr := d.Stderr.String()
		assert.Contains(t, stderr, fmt.Sprintf("drover: workdir %s/%s on %s, %s is in use by the drover run of job %q (controller %s, pid %d, run id ",
			kit.HostHome, j.Workdir, fleet.Hosts[0].Name, fleet.Hosts[1].Name, j.Name, ctl, first.Cmd.Process.Pid), second.Name)
		assert.Contains(t, stderr, "pass --force to take over", second.Name)
		assert.NotContains(t, stderr, "leftover", second.Name)
		assert.NotContains(t, stderr, "pushed", second.Name)
		assert.NotContains(t, d.Stdout.String(), "other job ran")
	}
	select {
	case <-first.Done:
		t.Fatalf("the first run ended (%d):\n%s", first.Code, first.Stderr.String())
	default:
	}
	assert.Equal(t, before, pidsOf(kit.JobProcs(t, j.Name)), "the first run's processes are the same ones")
	for i := range 2 {
		_, err := kit.HostFile(t, i, path.Join(j.Workdir, "w.sh"))
		assert.NoError(t, err, "%s: the first run's code is still there", fleet.Hosts[i].Name)
	}
	assert.NotContains(t, first.Stderr.String(), "leftover")
	assert.NotContains(t, first.Stderr.String(), "exited")

	first.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, first.Wait(t, 30*time.Second))
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
	// Now the other job may use the workdir.
	d := kit.StartDrover(t, other)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Contains(t, d.Stdout.String(), "[worker-0@"+fleet.Hosts[0].Name+"] other job ran\n")
}

// TestRunForceTakesOver: --force takes a live run's workdir; that run
// says who took it (controller, pid, run id), exits 1 without restarting,
// and never stops the new run's processes: the new run runs undisturbed
// in its first attempt (issue 30 item 4: both runs used to spend their
// restarts stopping each other's groups as leftovers).
func TestRunForceTakesOver(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: kit.SleepForever, Job: "max_restarts = 5"})
	first := kit.StartDrover(t, j)
	first.WaitLines(t, readyRE, 2, 60*time.Second)
	old := pidsOf(kit.JobProcs(t, j.Name))

	second := kit.StartDrover(t, j, "--force")
	require.Equal(t, kit.ExitFailed, first.Wait(t, 60*time.Second), first.Stderr.String())
	stderr := first.Stderr.String()
	assert.Regexp(t, `\S+: the drover run of job "`+j.Name+fmt.Sprintf(`" \(controller [^,]+, pid %d, run id [0-9a-f]+, since [^)]+\) took over workdir %s/%s \(--force\); stopping this run without restarting`, second.Cmd.Process.Pid, kit.HostHome, j.Workdir), stderr)
	assert.NotContains(t, stderr, "restarting the whole group", "the displaced run does not restart")
	assert.NotContains(t, stderr, "attempt 2/")
	assert.NotContains(t, stderr, "leftover", "the displaced run stops nothing as a leftover")
	second.WaitLines(t, readyRE, 2, 60*time.Second)
	assert.Contains(t, second.Stderr.String(), fmt.Sprintf("%s: taking over workdir %s/%s from the drover run of job %q", fleet.Hosts[0].Name, kit.HostHome, j.Workdir, j.Name))
	now := pidsOf(kit.JobProcs(t, j.Name))
	assert.Len(t, now, 2*3)
	for _, p := range old {
		assert.NotContains(t, now, p, "the first run's processes are gone")
	}
	// The first run is gone; the second's processes are the ones it
	// started in its first attempt, and it never saw one fail.
	assert.Equal(t, now, pidsOf(kit.JobProcs(t, j.Name)))
	second.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, second.Wait(t, 30*time.Second))
	s2 := second.Stderr.String()
	assert.NotContains(t, s2, "attempt 2/", "the new run was never disturbed")
	assert.NotContains(t, s2, "exited 143")
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
}

// TestRunThreeForcedRunsOneWins: three `drover run --force` of a running
// job, started at once, end with exactly one of them running: the others
// exit 1 naming who took over, and the job's processes on the hosts are
// that one's (issue 30 item 4: all three used to start processes).
func TestRunThreeForcedRunsOneWins(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: kit.SleepForever, Job: "max_restarts = 5"})
	first := kit.StartDrover(t, j)
	first.WaitLines(t, readyRE, 2, 60*time.Second)
	var forced []*kit.DroverProc
	for range 3 {
		forced = append(forced, kit.StartDrover(t, j, "--force"))
	}
	require.Equal(t, kit.ExitFailed, first.Wait(t, 60*time.Second), first.Stderr.String())
	var winner *kit.DroverProc
	testenv.Wait(t, 90*time.Second, "two of the forced runs to give up", func() (bool, string) {
		exited := 0
		for _, d := range forced {
			select {
			case <-d.Done:
				exited++
			default:
			}
		}
		return exited >= 2, fmt.Sprintf("%d gave up", exited)
	})
	for _, d := range forced {
		select {
		case <-d.Done:
			assert.Equal(t, kit.ExitFailed, d.Code, d.Stderr.String())
			assert.Regexp(t, `took over workdir \S+ \(--force\); stopping this run without restarting`, d.Stderr.String())
		default:
			require.Nil(t, winner, "exactly one forced run is left")
			winner = d
		}
	}
	require.NotNil(t, winner)
	winner.WaitLines(t, readyRE, 2, 60*time.Second)
	testenv.Wait(t, 30*time.Second, "one group of the job to run, the winner's", func() (bool, string) {
		procs := kit.JobProcs(t, j.Name)
		return len(procs) == 2*3, fmt.Sprintf("%v", procs)
	})
	for i := range 2 {
		out, err := fleet.Exec(i, "readlink", path.Join(kit.HostHome, j.Workdir, ".drover/lease"))
		require.NoError(t, err)
		assert.Contains(t, string(out), fmt.Sprintf(`"pid":%d,`, winner.Cmd.Process.Pid), fleet.Hosts[i].Name)
	}
	winner.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, winner.Wait(t, 30*time.Second), winner.Stderr.String())
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}

// TestRunSetupFailureGivesLeaseBack: a run that ends during setup (here a
// missing program, found by preflight) removes its leases: they used to
// stay and cost the next run a wait for them to go stale (issue 30 item
// 5).
func TestRunSetupFailureGivesLeaseBack(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["no-such-trainer"]`})
	d := kit.StartDrover(t, j)
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), d.Stderr.String())
	require.Contains(t, d.Stderr.String(), "program no-such-trainer")
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
}

// TestRunFailedInstallGivesLeaseBack: a run whose agent install fails
// (here the host's agent directory is read-only) removes the leases it
// took beside the install (issue 30 item 5).
func TestRunFailedInstallGivesLeaseBack(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: "echo done\n"})
	bin := path.Join(kit.HostHome, ".drover/bin")
	_, err := fleet.Exec(1, "sh", "-c", fmt.Sprintf("rm -rf %s && mkdir -p %s && chown %s %s && chmod 555 %s", bin, bin, fleettest.User, bin, bin))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = fleet.Exec(1, "chmod", "755", bin) })
	d := kit.StartDrover(t, j)
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), d.Stderr.String())
	require.Contains(t, d.Stderr.String(), "install drover agent on "+fleet.Hosts[1].Name)
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
}

// TestRunInterruptedInSetupGivesLeaseBack: SIGTERM while the run is
// still setting up (here pushing a large code directory, right after the
// lease was taken) removes the leases as an interrupt of a running group
// does (issue 30 item 5).
func TestRunInterruptedInSetupGivesLeaseBack(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: kit.SleepForever})
	big := make([]byte, 256<<10)
	for i := range 400 {
		require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", fmt.Sprintf("blob%03d.bin", i)), big, 0o644))
	}
	d := kit.StartDrover(t, j)
	testenv.WaitEvery(t, 5*time.Millisecond, 60*time.Second, "the run to take its lease", func() bool { return leaseOn(0, j) })
	d.Signal(t, syscall.SIGTERM)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 60*time.Second), d.Stderr.String())
	t.Logf("stderr:\n%s", d.Stderr.String())
	require.NotContains(t, d.Stderr.String(), "started", "interrupted before anything started")
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
}

// TestRunLeasePathNotALink: a regular file where the lease goes is named
// as such, and --force replaces it (it used to fail every later run,
// --force included).
func TestRunLeasePathNotALink(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Script: "echo done\n"})
	file := path.Join(kit.HostHome, j.Workdir, ".drover/lease")
	_, err := fleet.Exec(0, "runuser", "-u", fleettest.User, "--", "sh", "-c", fmt.Sprintf("mkdir -p %s && echo junk > %s", path.Dir(file), file))
	require.NoError(t, err)
	d := kit.StartDrover(t, j)
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Contains(t, d.Stderr.String(), fmt.Sprintf("%s: the workdir lease %s is a regular file (5 bytes), not drover's lease", fleet.Hosts[0].Name, file))
	assert.Contains(t, d.Stderr.String(), "pass --force to replace it")

	d = kit.StartDrover(t, j, "--force")
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Contains(t, d.Stderr.String(), "not drover's lease; replacing it (--force)")
	assert.False(t, leaseOn(0, j), "given back")
}

// TestRunTakesOverFromKilledController: the lease of a SIGKILLed
// controller stops being renewed; the next run sees that, takes the
// workdir and stops what is left of the old group.
func TestRunTakesOverFromKilledController(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: kit.SleepForever})
	first := kit.StartDrover(t, j)
	first.WaitLines(t, readyRE, 2, 60*time.Second)
	first.Signal(t, syscall.SIGKILL)
	first.Wait(t, 10*time.Second)
	require.True(t, leaseOn(0, j), "a SIGKILLed controller leaves its lease")

	second := kit.StartDrover(t, j)
	second.WaitLines(t, readyRE, 2, 60*time.Second)
	stderr := second.Stderr.String()
	assert.Regexp(t, fmt.Sprintf(`%s: the lease of the drover run of job "%s" \(controller [^,]+, pid %d, run id [0-9a-f]+, since [^)]+\) on workdir %s/%s was not renewed for \S+: that controller is gone`,
		fleet.Hosts[0].Name, j.Name, first.Cmd.Process.Pid, kit.HostHome, j.Workdir), stderr)
	assert.NotContains(t, stderr, "in use by")
	second.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, second.Wait(t, 30*time.Second))
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	assert.False(t, strings.Contains(second.Stderr.String(), "killing"), "stopped within the grace period")
}

// TestRunShowsPushWarnings: `drover run` shows each host's push warnings
// as `drover push` does (issue 30 item 10: the tar fallback, or a link
// left alone on the host, was silent under run).
func TestRunShowsPushWarnings(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Script: "echo done\n"})
	require.NoError(t, os.MkdirAll(filepath.Join(j.Dir, "code", "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "lib", "x.py"), []byte("x = 1\n"), 0o644))
	d := kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	require.NotContains(t, d.Stderr.String(), ": warning:")
	// The pushed directory replaced by a link on the host, and deleted
	// here: push leaves the link and what it points to alone, with a
	// warning.
	wd := path.Join(kit.HostHome, j.Workdir)
	_, err := fleet.Exec(0, "runuser", "-u", fleettest.User, "--", "sh", "-c", fmt.Sprintf("mkdir -p %s/elsewhere && rm -r %s/lib && ln -s %s/elsewhere %s/lib", wd, wd, wd, wd))
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(j.Dir, "code", "lib")))
	d = kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Regexp(t, `attempt 1/\d+: push to `+fleet.Hosts[0].Name+`: warning: lib is a symbolic link on the host`, d.Stderr.String())
}

// TestRunStdoutClosed: `drover run job.toml | head -1`: when the reader of
// drover's standard output exits, drover stops the group as Ctrl-C does,
// gives its leases back and writes the summary to events.log, instead of
// dying of SIGPIPE at its next write (issue 30 item 10).
func TestRunStdoutClosed(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `echo "ready rank=$RANK"; while :; do echo tick; sleep 0.2; done`})
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(kit.DroverBinary(t), "run", j.Path, "--log-dir", j.LogRoot)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+filepath.Join(j.Dir, "home"))
	var stderr transporttest.SyncBuffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	require.NoError(t, cmd.Start())
	pw.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		kit.KillJob(t, j.Name)
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err, stderr.String())
	require.Regexp(t, `^\[worker-\d@\S+\] `, line)
	pr.Close() // head -1 exits

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("drover still runs with its stdout closed:\n%s", stderr.String())
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.False(t, ws.Signaled(), "drover died of %v: %v\n%s", ws.Signal(), err, stderr.String())
	assert.Equal(t, kit.ExitInterrupted, cmd.ProcessState.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "drover: standard output closed")
	kit.WaitNoJobProcs(t, j.Name, 10*time.Second)
	for i := range 2 {
		assert.False(t, leaseOn(i, j), "%s: the run gave its lease back", fleet.Hosts[i].Name)
	}
	events, err := os.ReadFile(filepath.Join(j.RunDir(t), "events.log"))
	require.NoError(t, err)
	assert.Contains(t, string(events), "PROCESS")
	assert.Contains(t, string(events), "interrupted in attempt 1; logs in ")
}

// TestRunDroverDirPrivate: what a run leaves under a workdir's .drover on
// a host (process logs, error files, pidfiles) is the login user's only:
// the directories 0700, the logs 0600 (issue 30 item 10). A .drover made
// by an older drover (0755) is made private too.
func TestRunDroverDirPrivate(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Script: "echo secret; echo oops >&2; exit 3\n", Job: "max_restarts = 0"})
	wd := path.Join(kit.HostHome, j.Workdir)
	_, err := fleet.Exec(0, "runuser", "-u", fleettest.User, "--", "sh", "-c", "umask 022 && mkdir -p "+wd+"/.drover")
	require.NoError(t, err)
	d := kit.StartDrover(t, j)
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), d.Stderr.String())
	out, err := fleet.Exec(0, "find", wd+"/.drover", "-printf", `%y %m %P\n`)
	require.NoError(t, err)
	t.Logf("%s", out)
	var logs int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		mode, name, _ := strings.Cut(rest, " ")
		switch kind {
		case "d":
			assert.Equal(t, "700", mode, "directory .drover/%s", name)
		case "f":
			if strings.HasPrefix(name, "logs/") || strings.HasPrefix(name, "errors/") {
				assert.Equal(t, "600", mode, "file .drover/%s", name)
				logs++
			}
		}
	}
	assert.Positive(t, logs, "the process's log is there")
}

// TestRunLeaseChangedUnderRun: a live run whose lease vanished says so at
// once (an event) and puts it back; one whose lease another run took
// stops, naming it, and exits 1 without restarting (issue 30 item 5).
func TestRunLeaseChangedUnderRun(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Script: kit.SleepForever, Job: "max_restarts = 3"})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, readyRE, 1, 60*time.Second)
	file := path.Join(kit.HostHome, j.Workdir, ".drover/lease")
	asUser := func(script string) {
		t.Helper()
		_, err := fleet.Exec(0, "runuser", "-u", fleettest.User, "--", "sh", "-c", script)
		require.NoError(t, err)
	}
	asUser("rm " + file)
	said := fleet.Hosts[0].Name + ": the workdir lease " + file + " vanished under this run"
	testenv.Wait(t, 30*time.Second, "drover to say: "+said, func() (bool, string) {
		return strings.Contains(d.Stderr.String(), said), "\n" + d.Stderr.String()
	})
	testenv.WaitFor(t, 30*time.Second, "the lease to be put back", func() bool { return leaseOn(0, j) })

	taker := `{"id":"0badc0ffee","job":"someone","host":"elsewhere","pid":4242,"since":"2026-01-02T03:04:05Z"}`
	asUser(fmt.Sprintf("ln -s '%s' %s.new && mv -f %s.new %s", taker, file, file, file))
	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Contains(t, d.Stderr.String(), fmt.Sprintf(`%s: the drover run of job "someone" (controller elsewhere, pid 4242, run id 0badc0ffee, since 2026-01-02T03:04:05Z) took over workdir %s/%s; stopping this run without restarting`,
		fleet.Hosts[0].Name, kit.HostHome, j.Workdir))
	assert.NotContains(t, d.Stderr.String(), "restarting the whole group")
	kit.WaitNoJobProcs(t, j.Name, 10*time.Second)
	out, err := fleet.Exec(0, "readlink", file)
	require.NoError(t, err)
	assert.Equal(t, taker+"\n", string(out), "the taker's lease is left alone")
}
