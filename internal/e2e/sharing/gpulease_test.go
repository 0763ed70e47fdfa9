package sharing

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
)

// gpuJob is a job on the fleet's first three hosts (gpus = "auto", two
// stand-in GPUs each) named name, whose every process says which GPUs
// it got and runs until the file release exists.
func gpuJob(t *testing.T, name, release, more string) *kit.FleetJob {
	t.Helper()
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Job: more, Script: fmt.Sprintf(`echo "start host=$DROVER_HOST gpus=$CUDA_VISIBLE_DEVICES"
while [ ! -e %q ]; do sleep 0.1; done
`, release)})
	data, err := os.ReadFile(j.Path)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(data), `"`+j.Name+`"`, `"`+name+`"`)
	text = strings.ReplaceAll(text, j.Workdir, j.Workdir+"-"+name)
	j.Name, j.Workdir = name, j.Workdir+"-"+name
	require.NoError(t, os.WriteFile(j.Path, []byte(text), 0o644))
	var b strings.Builder
	fmt.Fprintf(&b, "[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for _, h := range fleet.ClusterHosts()[:3] {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = \"auto\"\n", h.Name, h.Address)
	}
	require.NoError(t, os.WriteFile(j.Inventory, []byte(b.String()), 0o644))
	return j
}

var startLine = regexp.MustCompile(`(?m)^\[worker-\d+@(\S+)\] start host=\S+ gpus=(\S*)$`)

// gpusByHost waits for a start line of each of the three hosts and
// returns the GPUs each got.
func gpusByHost(t *testing.T, d *kit.DroverProc) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range d.WaitLines(t, startLine, 3, 90*time.Second) {
		out[m[1]] = m[2]
	}
	require.Len(t, out, 3, "one start per host")
	return out
}

// Issue 39: three hosts of two GPUs, each reported by a stand-in
// nvidia-smi, so that only the leases keep runs apart. Two jobs with
// gpus_per_host = 1 started at the same instant each get one GPU per
// host, never the same one, and run at the same time; a third fails at
// once naming both holders; with --queue it waits, and starts when one
// of them ends. A second Unix user cannot remove nor take the leases; a
// lease whose holder was SIGKILLed with its agent is reclaimed.
func TestGPULeases(t *testing.T) {
	fleettest.Need(t, fleet)
	leaseDirs := make([]string, 3)
	for i := range 3 {
		kit.FakeGPUs(t, i)
		leaseDirs[i] = kit.PrivateGPULeases(t, i) // over fakeGPUs' own: this test reads it
	}
	rel, err := os.MkdirTemp("", "drover-gpu-release-") // the hosts' user must see it
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(rel) })
	require.NoError(t, os.Chmod(rel, 0o755))
	release := func(name string) string { return filepath.Join(rel, name) }
	one := "gpus_per_host = 1"
	a, b := gpuJob(t, "lease-a", release("a"), one), gpuJob(t, "lease-b", release("b"), one)
	da, db := kit.StartDrover(t, a), kit.StartDrover(t, b)
	ga, gb := gpusByHost(t, da), gpusByHost(t, db)
	for host, g := range ga {
		assert.Contains(t, []string{"0", "1"}, g, host)
		assert.NotEqual(t, g, gb[host], "%s: both runs got GPU %s", host, g)
	}

	c := gpuJob(t, "lease-c", release("c"), one)
	dc := kit.StartDrover(t, c)
	require.Equal(t, kit.ExitFailed, dc.Wait(t, 60*time.Second), dc.Stderr.String())
	stderr := dc.Stderr.String()
	assert.Contains(t, stderr, `job "lease-a"`)
	assert.Contains(t, stderr, `job "lease-b"`)
	assert.Contains(t, stderr, "--queue")
	assert.NotRegexp(t, startLine, dc.Stdout.String())

	t.Run("another user", func(t *testing.T) { otherUser(t, leaseDirs[0]) })

	probe := kit.StartDroverArgs(t, c, "probe", c.Path)
	require.Equal(t, 0, probe.Wait(t, 60*time.Second), probe.Stderr.String())
	out := probe.Stdout.String()
	t.Logf("probe:\n%s", out)
	for _, h := range fleet.Hosts[:3] {
		for _, g := range []string{"0", "1"} {
			run := "lease-a"
			if ga[h.Name] != g {
				run = "lease-b"
			}
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(h.Name)+`\s+`+g+`\s.*\sno: leased\s+`+run+` by `+fleettest.User+` \(run \S+\)\s*$`, out)
		}
	}

	// --queue-timeout gives up, naming the holders; Ctrl-C leaves the
	// queue at once.
	dt := kit.StartDrover(t, c, "--queue", "--queue-timeout", "2s")
	require.Equal(t, kit.ExitFailed, dt.Wait(t, 60*time.Second), dt.Stderr.String())
	assert.Regexp(t, `waited --queue-timeout 2s for the GPUs; waiting for GPUs on \S+ \(--queue\): place 1 of 1; GPU \d leased by the drover run of job "lease-[ab]"`, dt.Stderr.String())
	st := kit.Status(t, c) // the run's record on its hosts says why it ended
	assert.Equal(t, agent.RunFailed, st.State)
	assert.Contains(t, st.Reason, "waited --queue-timeout 2s for the GPUs")
	assert.Empty(t, st.Queue)
	di := kit.StartDrover(t, c, "--queue")
	di.WaitStderr(t, regexp.MustCompile(`waiting for GPUs on`), 60*time.Second)
	di.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, di.Wait(t, 30*time.Second), di.Stderr.String())
	for i := range 3 {
		testenv.WaitFor(t, 10*time.Second, "the interrupted run out of the queue", func() bool {
			ws, err := gpulease.Waiters(leaseDirs[i])
			return err == nil && len(ws) == 0
		})
	}

	dq := kit.StartDrover(t, c, "--queue")
	dq.WaitStderr(t, regexp.MustCompile(`waiting for GPUs on \S+ \(--queue\): place 1 of 1; GPU \d leased by the drover run of job "lease-[ab]"`), 60*time.Second)
	assert.NotRegexp(t, startLine, dq.Stdout.String())
	ps := kit.StartDroverArgs(t, c, "ps", "--inventory", c.Inventory)
	require.Equal(t, 0, ps.Wait(t, 60*time.Second), ps.Stderr.String())
	t.Logf("ps --inventory:\n%s", ps.Stdout.String())
	for _, h := range fleet.Hosts[:3] {
		for _, row := range []string{`(0|1)\s+lease-a\s+`, `(0|1)\s+lease-b\s+`, `waiting\s+lease-c\s+`} {
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(h.Name)+`\s+`+row+fleettest.User+`\s`, ps.Stdout.String())
		}
	}
	// -d --queue returns at once, its run waiting in the background
	// behind c's; another one stopped while queued leaves no trace.
	d := gpuJob(t, "lease-d", release("d"), one+"\nrestart_backoff = \"2s\"")
	idD := queuedDetached(t, d, `place 2 of 2; ahead: the drover run of job "lease-c"`)
	stopQueued(t, gpuJob(t, "lease-e", release("e"), one), leaseDirs)

	require.NoError(t, os.WriteFile(release("a"), nil, 0o644))
	require.Equal(t, 0, da.Wait(t, 60*time.Second), da.Stderr.String())
	gc := gpusByHost(t, dq)
	assert.Equal(t, ga, gc, "the queued run got the GPUs the ended run gave back")
	assert.Equal(t, agent.RunQueued, kit.Status(t, d).State, "d waits on, behind c")
	require.NoError(t, os.WriteFile(release("c"), nil, 0o644))
	require.Equal(t, 0, dq.Wait(t, 60*time.Second), dq.Stderr.String())
	st = kit.WaitStatus(t, d, 90*time.Second, "the queued run d running", func(st runview.RunStatus) bool { return kit.Running(st) == 3 })
	assert.Equal(t, idD, st.RunID)
	assert.Empty(t, st.Queue)

	// d restarts (its worker on the first host killed) while f waits
	// for GPUs: d keeps its GPUs across the restart, f waits on.
	f := gpuJob(t, "lease-f", release("f"), one)
	df := kit.StartDrover(t, f, "--queue")
	df.WaitStderr(t, regexp.MustCompile(`waiting for GPUs on \S+ \(--queue\): place 1 of 1`), 60*time.Second)
	for _, p := range kit.JobProcs(t, d.Name, 0) {
		if p.Env["DROVER_JOB"] == d.Name { // the workload, not its agent
			syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
	kit.WaitStatus(t, d, 90*time.Second, "d running again in attempt 2", func(st runview.RunStatus) bool { return st.Attempt == 2 && kit.Running(st) == 3 })
	assert.NotRegexp(t, startLine, df.Stdout.String(), "f took d's GPUs between two of d's attempts")
	require.NoError(t, os.WriteFile(release("d"), nil, 0o644))
	kit.WaitStatus(t, d, 60*time.Second, "d succeeded", func(st runview.RunStatus) bool { return st.State == agent.RunSucceeded })
	gf := gpusByHost(t, df)
	assert.Equal(t, ga, gf, "f got the GPUs d gave back")
	require.NoError(t, os.WriteFile(release("f"), nil, 0o644))
	require.Equal(t, 0, df.Wait(t, 60*time.Second), df.Stderr.String())

	// b's holders on every host SIGKILLed, then its controller: its
	// leases stay behind, their locks gone. The next run reclaims them.
	for _, p := range kit.JobProcs(t, b.Name, 0, 1, 2) {
		syscall.Kill(p.Pid, syscall.SIGKILL) // an agent's command may die with it first
	}
	require.NoError(t, db.Cmd.Process.Kill())
	db.Wait(t, 30*time.Second)
	left, err := filepath.Glob(filepath.Join(leaseDirs[0], "*.lease"))
	require.NoError(t, err)
	assert.NotEmpty(t, left, "the SIGKILLed run's lease files are left behind")
	all := gpuJob(t, "lease-all", release("all"), "gpus_per_host = 2")
	dall := kit.StartDrover(t, all)
	for host, g := range gpusByHost(t, dall) {
		assert.Equal(t, "0,1", g, host)
	}
	// A SIGKILLed controller: its agents stop the group, and the leases
	// die with the last of them (the files stay until the next take).
	require.NoError(t, dall.Cmd.Process.Kill())
	dall.Wait(t, 30*time.Second)
	for i := range 3 {
		testenv.WaitFor(t, 30*time.Second, "no live lease left on host", func() bool {
			live, err := gpulease.List(leaseDirs[i]) // as root: removes nothing of drovertest's
			return err == nil && len(live) == 0
		})
	}
}

// queuedDetached starts `drover run -d --queue` of j, which must return
// at once with its run waiting in the background (its stderr saying
// where: ahead), shown as queued by drover status and drover ps; it
// returns the run's id.
func queuedDetached(t *testing.T, j *kit.FleetJob, ahead string) string {
	t.Helper()
	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", "--queue", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Regexp(t, `run \S+ waits for GPUs in the background \(queued\)`, d.Stdout.String())
	assert.Regexp(t, `waiting for GPUs on \S+ \(--queue\): `+regexp.QuoteMeta(ahead)+`.*; GPU \d leased by the drover run of job "lease-[ab]"`, d.Stderr.String())
	m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String())
	require.NotNil(t, m, d.Stdout.String())
	sup, _ := strconv.Atoi(m[1])
	testenv.SignalAtCleanup(t, sup, syscall.SIGKILL, false)
	st := kit.WaitStatus(t, j, 30*time.Second, "queued on every host", func(st runview.RunStatus) bool { return len(st.Queue) == 3 })
	assert.Equal(t, agent.RunQueued, st.State)
	assert.True(t, st.Supervisor.Alive)
	assert.Empty(t, st.Processes)
	for _, line := range st.Queue {
		assert.Contains(t, line, ahead)
	}
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "ps", "--json")
	require.Equal(t, 0, code, errs)
	var rows []hostio.PsRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 1, out)
	assert.Equal(t, st.RunID, rows[0].RunID)
	assert.Equal(t, agent.RunQueued, rows[0].State)
	return st.RunID
}

// stopQueued starts j with -d --queue behind the runs that wait already,
// stops it with drover stop, and checks that nothing of it is left: no
// entry in any host's queue, its supervisor gone, its record stopped.
func stopQueued(t *testing.T, j *kit.FleetJob, leaseDirs []string) {
	t.Helper()
	id := queuedDetached(t, j, "place 3 of 3")
	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, errs, "through its agents", "the supervisor left the queue and recorded the end")
	for i, dir := range leaseDirs {
		ws, err := gpulease.Waiters(dir)
		require.NoError(t, err)
		for _, w := range ws {
			assert.NotEqual(t, id, w.RunID, "host %d: the stopped run is still in the queue", i)
		}
	}
	st := kit.Status(t, j)
	assert.Equal(t, agent.RunStopped, st.State)
	assert.Contains(t, st.Reason, "stopped by drover stop from")
	kit.WaitStatus(t, j, 10*time.Second, "the stopped run's supervisor gone", func(st runview.RunStatus) bool { return !st.Supervisor.Alive })
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, "ps", "--json")
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, out, id, "drover ps lists the stopped run as live")
	kit.WaitNoJobProcs(t, j.Name, 10*time.Second, 0, 1, 2)
}

// otherUser checks, as a second Unix user on the host whose lease
// directory is dir (holding the leases of two live runs), that it can
// neither remove nor overwrite a lease, nor take the GPU with drover.
func otherUser(t *testing.T, dir string) {
	const user = "drovertest2"
	if _, err := exec.Command("id", user).Output(); err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/bin/sh", user).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Cleanup(func() { exec.Command("userdel", user).Run() })
	}
	leases, err := filepath.Glob(filepath.Join(dir, "*.lease"))
	require.NoError(t, err)
	require.Len(t, leases, 2, "host 0: one lease per run")
	before, err := os.ReadFile(leases[0])
	require.NoError(t, err)
	inHost := filepath.Join(gpulease.DefaultDir, filepath.Base(leases[0]))
	as := func(args ...string) error {
		_, err := fleet.ExecInLogins(0, append([]string{"runuser", "-u", user, "--"}, args...)...)
		return err
	}
	out, err := fleet.ExecInLogins(0, "runuser", "-u", user, "--", "cat", inHost)
	require.NoError(t, err, "another user reads a lease")
	assert.Equal(t, string(before), string(out))
	assert.Error(t, as("rm", "-f", inHost), "another user removed a lease")
	assert.Error(t, as("sh", "-c", "echo forged > "+inHost), "another user overwrote a lease")
	assert.Error(t, as("mv", "-f", "/dev/null", inHost))
	after, err := os.ReadFile(leases[0])
	require.NoError(t, err)
	assert.Equal(t, before, after)

	binDir, err := os.MkdirTemp("", "drover-other-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(binDir) })
	require.NoError(t, os.Chmod(binDir, 0o755))
	bin := filepath.Join(binDir, "drover")
	data, err := os.ReadFile(kit.DroverBinary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	out, err = fleet.ExecInLogins(0, "runuser", "-u", user, "--", "sh", "-c",
		bin+" agent gpu-lease --gpu 0=GPU-h0-0 --gpu 1=GPU-h0-1 --count 1 --job thief --run-id 20261129-060000-0123ab"+
			" --controller-host x --controller-pid 1 --since 2026-11-29T06:00:00Z </dev/null 2>&1; echo exit=$?")
	require.NoError(t, err) // ExecInLogins says nothing of a command that failed but its stderr
	assert.Contains(t, string(out), "exit=1", "the other user took a GPU")
	assert.Contains(t, string(out), `"state":"busy"`)
	assert.Contains(t, string(out), `"job":"lease-a"`)
}
