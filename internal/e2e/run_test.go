package e2e

// Fleet tests of `drover run`: the real drover binary (built once, see
// kit.DroverBinary) runs as the controller here and as the agent on four real
// SSH hosts, and the tests disturb the run the way the world does (kill -9,
// Ctrl-C, SIGKILL, a cut cable, a host that moved) and check what is left
// on the hosts, what the processes saw and what drover reported.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// Done-when 1: kill -9 of one training process mid-run stops and restarts
// the whole group; the processes see DROVER_RESTART_COUNT=1 and the job
// succeeds.
func TestRunKill9RestartsGroup(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT pid=$$"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
sleep 0.5
echo "done rank=$RANK restart=$DROVER_RESTART_COUNT"
`, Job: "max_restarts = 3"})
	d := kit.StartDrover(t, j)
	starts := d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-(\d)@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] start rank=\d restart=0 pid=(\d+)$`), 4, 60*time.Second)

	// kill -9 worker-2's shell, checked to be the job's process first.
	var victim int
	for _, m := range starts {
		if m[1] == "2" {
			victim, _ = strconv.Atoi(m[2])
		}
	}
	var found bool
	for _, p := range kit.JobProcs(t, j.Name, 2) {
		if p.Pid == victim {
			found = true
			assert.Equal(t, "0", p.Env["DROVER_RESTART_COUNT"])
		}
	}
	require.True(t, found, "pid %d printed by worker-2 is not a process of the job on "+fleet.Hosts[2].Name, victim)
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))

	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "worker-2@"+fleet.Hosts[2].Name+" exited 137 (SIGKILL); stopping 3 process(es)")
	assert.Contains(t, stderr, "attempt 2/4: restarting the whole group in 200ms")
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded")
	for i := range 4 {
		proc := fmt.Sprintf("worker-%d", i)
		// The first attempt's processes all ran with 0 and were stopped
		// before the second started; every one ran again with 1.
		first := j.LogFile(t, 1, proc)
		assert.Contains(t, first, fmt.Sprintf("start rank=%d restart=0 ", i), proc)
		assert.NotContains(t, first, "done rank", "%s finished in the first attempt, so the group was not stopped", proc)
		second := j.LogFile(t, 2, proc)
		assert.Contains(t, second, fmt.Sprintf("start rank=%d restart=1 ", i), proc)
		assert.Contains(t, second, fmt.Sprintf("done rank=%d restart=1\n", i), proc)
		assert.Regexp(t, fmt.Sprintf(`(?m)^%s\s+%s\s+2\s+0\s`, proc, fleet.Hosts[i].Name), stderr, "summary row")
	}
	assert.Contains(t, stderr, "succeeded after 2 attempt(s)")
	assert.Empty(t, kit.JobProcs(t, j.Name), "nothing of the job is left once drover returned")
}

// Done-when 2: a process that fails every time makes drover exit 1 after
// max_restarts, with the summary table on stderr.
func TestRunFailsAfterMaxRestarts(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "attempt restart=$DROVER_RESTART_COUNT rank=$RANK"
if [ "$RANK" = 1 ]; then echo "broken" >&2; exit 3; fi
sleep 1000
`, Job: "max_restarts = 2"})
	d := kit.StartDrover(t, j)
	require.Equal(t, 1, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	for n := 1; n <= 3; n++ {
		assert.Contains(t, stderr, fmt.Sprintf("attempt %d/3: worker-1@"+fleet.Hosts[1].Name+" exited 3: stderr: broken; stopping 1 process(es)", n))
		// stdout and stderr are two pipes: their relative order is lost.
		log := j.LogFile(t, n, "worker-1")
		assert.ElementsMatch(t, []string{fmt.Sprintf("attempt restart=%d rank=1", n-1), "broken"}, strings.Split(strings.TrimSuffix(log, "\n"), "\n"))
	}
	assert.NotContains(t, stderr, "attempt 4/")
	assert.Regexp(t, `(?m)^PROCESS\s+HOST\s+ATTEMPTS\s+EXIT\s+DURATION$`, stderr)
	assert.Regexp(t, `(?m)^worker-0\s+`+regexp.QuoteMeta(fleet.Hosts[0].Name)+`\s+3\s+143 \(SIGTERM\)\s+\S+$`, stderr)
	assert.Regexp(t, `(?m)^worker-1\s+`+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\s+3\s+3\s+\S+$`, stderr)
	assert.Contains(t, stderr, "failed after 3 attempt(s): worker-1@"+fleet.Hosts[1].Name+" exited 3: stderr: broken; no restarts left (max_restarts = 2); logs in "+j.RunDir(t))
	_, err := os.Stat(filepath.Join(j.RunDir(t), "attempt-4"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Done-when 3: SIGKILL to drover itself leaves no process of the job on
// any host within stop_grace and a few seconds.
func TestRunControllerSIGKILLLeavesNothing(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.SleepForever})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] ready rank=\d$`), 4, 60*time.Second)
	require.Len(t, kit.JobProcs(t, j.Name), 4*3, "agent, sh and sleep on each host")
	d.Signal(t, syscall.SIGKILL)
	assert.Equal(t, 128+int(syscall.SIGKILL), d.Wait(t, 5*time.Second))
	kit.WaitNoJobProcs(t, j.Name, 2*time.Second+8*time.Second)
}

// Done-when 4: Ctrl-C stops every process gracefully and drover exits 130.
func TestRunInterrupt(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `
trap 'echo "rank $RANK got TERM"; exit 143' TERM
echo "ready rank=$RANK"
sleep 1000 &
wait
`})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] ready rank=\d$`), 4, 60*time.Second)
	d.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 2*time.Second+10*time.Second))
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "drover: interrupt: stopping every process (again to kill at once)")
	assert.Contains(t, stderr, "attempt 1/4: interrupted; stopping 4 process(es)")
	assert.Contains(t, stderr, "interrupted in attempt 1; logs in "+j.RunDir(t))
	assert.NotContains(t, stderr, "killing", "the processes stopped within the grace period")
	for i := range 4 {
		// The workload saw the graceful stop and had time to say so.
		assert.Contains(t, j.LogFile(t, 1, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("rank %d got TERM\n", i))
	}
	kit.WaitNoJobProcs(t, j.Name, 3*time.Second)
}

// Done-when 4, second part: a second Ctrl-C kills at once, without waiting
// out a stop_grace that the workload ignores SIGTERM through.
func TestRunSecondInterruptKills(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
trap '' TERM
echo "ready rank=$RANK"
sleep 1000
`, Job: `stop_grace = "60s"`})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] ready rank=\d$`), 2, 60*time.Second)
	d.Signal(t, syscall.SIGINT)
	// The first Ctrl-C asks for a graceful stop, which the workload ignores.
	testenv.Wait(t, 10*time.Second, "a stop after the first SIGINT", func() (bool, string) {
		return strings.Contains(d.Stderr.String(), "interrupted; stopping 2 process(es)"), d.Stderr.String()
	})
	time.Sleep(time.Second)
	require.Len(t, kit.JobProcs(t, j.Name), 2*3, "the workload ignores SIGTERM")
	d.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 10*time.Second), "a second Ctrl-C does not wait for the 60s grace")
	assert.Contains(t, d.Stderr.String(), "killing every process now")
	for i := range 2 {
		assert.Regexp(t, fmt.Sprintf(`(?m)^worker-%d\s+%s\s+1\s+137 \(SIGKILL\)`, i, fleet.Hosts[i].Name), d.Stderr.String())
	}
	kit.WaitNoJobProcs(t, j.Name, 3*time.Second)
}

// Done-when 5: a host whose link is cut mid-run gets the group stopped on
// the other hosts; once the link is back, the restart succeeds.
func TestRunHostCutAndHealed(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 2\nhost_wait = \"60s\""})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] start rank=\d restart=0$`), 4, 60*time.Second)
	require.NoError(t, fleet.Cut(3))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(3))
		}
	})
	// Keepalives notice the loss within seconds; the other hosts' first
	// attempt is stopped (stop_grace 2s) right after.
	kit.WaitNoJobProcs(t, j.Name, 30*time.Second, 0, 1, 2)
	// The cut host's agent hears no heartbeat and stops its group too.
	kit.WaitNoJobProcs(t, j.Name, 15*time.Second, 3)
	stderr := d.Stderr.String()
	assert.Regexp(t, `worker-3@`+regexp.QuoteMeta(fleet.Hosts[3].Name)+`: `+regexp.QuoteMeta(kit.HostLabel(3))+` lost: .*connection lost`, stderr)
	// drover is now waiting for cd-h3 (host_wait 60s).
	testenv.Wait(t, 30*time.Second, "drover to wait for "+fleet.Hosts[3].Name, func() (bool, string) {
		return strings.Contains(d.Stderr.String(), kit.HostLabel(3)+" unreachable, waiting up to 1m0s for it"), d.Stderr.String()
	})
	require.NoError(t, fleet.Heal(3))
	healed = true
	require.Equal(t, 0, d.Wait(t, 60*time.Second))
	stderr = d.Stderr.String()
	assert.Contains(t, stderr, kit.HostLabel(3)+" is back")
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded", "a lost host adds an attempt to max_restarts + 1")
	for i := range 4 {
		assert.Contains(t, j.LogFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("start rank=%d restart=1\ndone rank=%d\n", i, i))
	}
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// A host that stays unreachable past host_wait is replaced by the
// inventory's spare, which takes over its ranks; the job then succeeds.
func TestRunHostReplacedBySpare(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `
echo "start rank=$RANK world=$WORLD_SIZE restart=$DROVER_RESTART_COUNT host=$DROVER_HOST"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 2\nhost_wait = \"3s\""})
	hosts := fleet.ClusterHosts()
	hosts[3].Spare = true
	kit.WriteInventory(t, j.Inventory, hosts)

	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h[0-2]\] start rank=\d world=3 restart=0 `), 3, 60*time.Second)
	require.NoError(t, fleet.Cut(2))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(2)) })

	require.Equal(t, 0, d.Wait(t, 90*time.Second), d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Regexp(t, regexp.QuoteMeta(kit.HostLabel(2))+` unreachable: .*; replaced by spare `+regexp.QuoteMeta(kit.HostLabel(3)), stderr)
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded", "a lost host adds an attempt to max_restarts + 1")
	second := j.LogFile(t, 2, "worker-2")
	assert.Contains(t, second, "start rank=2 world=3 restart=1 host="+fleet.Hosts[3].Name+"\ndone rank=2\n", "the spare runs the lost host's rank")
	for i := range 2 {
		assert.Contains(t, j.LogFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("start rank=%d world=3 restart=1 host=%s\n", i, fleet.Hosts[i].Name))
	}
	// The cut host's agent hears no heartbeat and stops its group itself.
	kit.WaitNoJobProcs(t, j.Name, 20*time.Second, 2)
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Issue 19: a host that refuses drover's key when the group restarts (its
// key was revoked, authorized_keys replaced) fails the run at once: waiting
// host_wait (here 10 minutes) for it could not help. Before authentication
// errors had a type of their own, this one was taken for an unreachable host.
func TestRunAuthFailureAtRestartFailsAtOnce(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$RANK" = 1 ]; then
	while [ ! -e fail-now ]; do sleep 0.1; done
	exit 1
fi
sleep 1000
`, Job: "max_restarts = 2\nhost_wait = \"10m\""})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0$`), 2, 60*time.Second)

	// From the next attempt on, drover logs in with a key no host accepts.
	key := filepath.Join(t.TempDir(), "id_other")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput()
	require.NoError(t, err, "%s", out)
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	edited := strings.Replace(string(inv), fmt.Sprintf("identity_file = %q", fleet.KeyFile), fmt.Sprintf("identity_file = %q", key), 1)
	require.NotEqual(t, string(inv), edited)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(edited), 0o644))
	_, err = fleet.Exec(1, "touch", path.Join(kit.HostHome, j.Workdir, "fail-now"))
	require.NoError(t, err)

	require.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second), "drover waits host_wait for a host that refuses its key")
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, `auth failed for user "drovertest": tried `+key)
	assert.NotContains(t, stderr, "waiting up to")
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Done-when 6: a host that moved to a new address, with the inventory
// edited during the first attempt, is reached at the new address when the
// group restarts (and rank 0's new address becomes MASTER_ADDR).
func TestRunHostMovedBetweenAttempts(t *testing.T) {
	fleettest.Need(t, fleet)
	newAddr := fleet.SpareAddr(60)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT master=$MASTER_ADDR conn=$SSH_CONNECTION"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	if [ "$RANK" = 1 ]; then
		while [ ! -e fail-now ]; do sleep 0.1; done
		echo "failing on purpose"
		exit 1
	fi
	sleep 1000
fi
echo "done rank=$RANK"
`, Job: "max_restarts = 2\nhost_wait = \"30s\""})
	oldAddr := fleet.ClusterHosts()[0].Address
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] start rank=\d restart=0 master=`+regexp.QuoteMeta(oldAddr)+` `), 2, 60*time.Second)

	// cd-h0 (rank 0) comes back with a new address; the user edits the
	// inventory; then rank 1 fails so that the group restarts.
	require.NoError(t, fleet.Move(0, newAddr))
	t.Cleanup(func() { assert.NoError(t, fleet.Move(0, oldAddr)) })
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	edited := strings.Replace(string(inv), fmt.Sprintf("address = %q", oldAddr), fmt.Sprintf("address = %q", newAddr), 1)
	require.NotEqual(t, string(inv), edited)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(edited), 0o644))
	_, err = fleet.Exec(1, "touch", path.Join(kit.HostHome, j.Workdir, "fail-now"))
	require.NoError(t, err)

	require.Equal(t, 0, d.Wait(t, 90*time.Second))
	first := j.LogFile(t, 1, "worker-1")
	assert.Contains(t, first, "failing on purpose\n")
	for i := range 2 {
		second := j.LogFile(t, 2, fmt.Sprintf("worker-%d", i))
		assert.Contains(t, second, fmt.Sprintf("start rank=%d restart=1 master=%s ", i, newAddr), "MASTER_ADDR is rank 0's new address")
		assert.Contains(t, second, fmt.Sprintf("done rank=%d\n", i))
	}
	// sshd's SSH_CONNECTION names the address drover connected to.
	assert.Regexp(t, ` conn=\S+ \d+ `+regexp.QuoteMeta(newAddr)+` 22\n`, j.LogFile(t, 2, "worker-0"))
	assert.Regexp(t, ` conn=\S+ \d+ `+regexp.QuoteMeta(oldAddr)+` 22\n`, j.LogFile(t, 1, "worker-0"))
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Done-when 7: a TensorFlow job whose parameter server never exits
// succeeds when the chief and workers are done, and the ps is stopped.
func TestRunTensorFlowStopsPS(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "$DROVER_ROLE $DROVER_INDEX up"
case "$DROVER_ROLE" in
ps) exec sleep 1000 ;;
*) sleep 1; echo "$DROVER_ROLE $DROVER_INDEX finished" ;;
esac
`, Job: `framework = "tensorflow"
procs_per_host = 2

[job.roles]
chief = 1
worker = 2
ps = 1
`})
	d := kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "success policy met (all-workers); stopping 1 process(es)")
	assert.Regexp(t, `(?m)^ps-0\s+`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\s+1\s+143 \(SIGTERM\)`, stderr)
	for _, p := range []string{"chief-0", "worker-0", "worker-1"} {
		assert.Regexp(t, `(?m)^`+p+`\s+`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\s+1\s+0\s`, stderr)
		role, idx, _ := strings.Cut(p, "-")
		assert.Contains(t, j.LogFile(t, 1, p), role+" "+idx+" finished\n")
	}
	assert.Contains(t, stderr, "succeeded after 1 attempt(s)")
	assert.Empty(t, kit.JobProcs(t, j.Name), "the ps's sleep is gone")
}

// Done-when 8: every line printed reaches the log file exactly once and
// whole, and the terminal shows every line with its [proc@host] prefix.
func TestRunLogsEveryLine(t *testing.T) {
	fleettest.Need(t, fleet)
	const n = 5000
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["/usr/bin/python3", "spew.py"]`})
	// stdout is block-buffered (8 KiB chunks cut lines anywhere), stderr
	// line-buffered; both go out as fast as Python can write.
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "spew.py"), []byte(fmt.Sprintf(`
import os, sys
rank = os.environ["RANK"]
pad = "x" * (int(rank) * 37 + 50)
for i in range(%d):
    print(f"out {rank} {i:05d} {pad} end")
    print(f"err {rank} {i:05d} {pad} end", file=sys.stderr)
`, n)), 0o644))
	d := kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second))

	lineRE := regexp.MustCompile(`^(out|err) (\d) (\d{5}) x+ end$`)
	checkLines := func(what string, lines []string, rank string) {
		t.Helper()
		seen := map[string]int{}
		for _, l := range lines {
			m := lineRE.FindStringSubmatch(l)
			if !assert.NotNil(t, m, "%s: malformed line %q", what, l) {
				return
			}
			assert.Equal(t, rank, m[2], "%s: line from another process: %q", what, l)
			assert.Len(t, l, len("out 0 00000  end")+kit.Atoi(rank)*37+50, "%s: %q", what, l)
			seen[m[1]+m[3]]++
		}
		assert.Len(t, seen, 2*n, "%s: distinct lines", what)
		for k, c := range seen {
			if c != 1 {
				assert.Failf(t, "duplicate line", "%s: %s seen %d times", what, k, c)
			}
		}
	}
	for i := range 2 {
		rank := strconv.Itoa(i)
		log := j.LogFile(t, 1, "worker-"+rank)
		require.True(t, strings.HasSuffix(log, "end\n"), "log ends with a whole line")
		checkLines("log worker-"+rank, strings.Split(strings.TrimSuffix(log, "\n"), "\n"), rank)

		prefix := fmt.Sprintf("[worker-%d@%s] ", i, fleet.Hosts[i].Name)
		var term []string
		sc := bufio.NewScanner(strings.NewReader(d.Stdout.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				term = append(term, rest)
			} else if !strings.HasPrefix(sc.Text(), "[worker-") {
				assert.Failf(t, "unprefixed terminal line", "%q", sc.Text())
			}
		}
		checkLines("terminal worker-"+rank, term, rank)
	}
}

// Done-when 9: preflight stops a job before anything starts when the
// program is missing on the hosts, naming host and program.
func TestRunPreflightMissingProgram(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Command: `["no-such-trainer", "--epochs", "1"]`, Job: "max_restarts = 3"})
	d := kit.StartDrover(t, j)
	assert.Equal(t, 1, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	for i := range 2 {
		assert.Regexp(t, `preflight on `+regexp.QuoteMeta(kit.HostLabel(i))+`: program no-such-trainer: .*not found`, stderr)
	}
	assert.NotContains(t, stderr, "started", "nothing was started")
	assert.NotContains(t, stderr, "PROCESS", "no summary table without processes")
	assert.Contains(t, stderr, "failed after 1 attempt(s): preflight on "+fleet.Hosts[0].Name)
	assert.NotContains(t, stderr, "attempt 2/", "a setup failure is not retried")
	_, err := os.Stat(filepath.Join(j.RunDir(t), "attempt-1"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no process log was opened")
}

// Issue 37: a fleet met for the first time (an empty known_hosts) is named
// whole: every host with the key it presented, one ssh-keyscan line for
// them all, said once, a line per host (no literal "\n").
func TestRunEmptyKnownHostsNamesEveryHost(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Script: kit.SleepForever})
	empty := filepath.Join(j.Dir, "known_hosts")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.Replace(string(inv), fmt.Sprintf("%q", fleet.KnownHosts), fmt.Sprintf("%q", empty), 1)), 0o644))
	d := kit.StartDrover(t, j)
	assert.Equal(t, kit.ExitFailed, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	t.Logf("drover stderr:\n%s", stderr)
	for i := range 3 {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(fleet.Hosts[i].Name+" ("+fleet.Hosts[i].Addr+":22): presented ")+`\S+ key SHA256:`, stderr, "host %d on a line of its own", i)
	}
	assert.Equal(t, 1, strings.Count(stderr, "ssh-keyscan"), "one ssh-keyscan line:\n%s", stderr)
	assert.Contains(t, stderr, "`ssh-keyscan "+fleet.Hosts[0].Addr+" "+fleet.Hosts[1].Addr+" "+fleet.Hosts[2].Addr+" >> "+empty+"`")
	assert.Equal(t, 1, strings.Count(stderr, "host keys of 3 hosts unknown"), "said once:\n%s", stderr)
	assert.NotContains(t, stderr, `\n`)
	assert.Empty(t, kit.JobProcs(t, j.Name))
}

// Done-when 9, second part: a planned port already in use on the rank-0
// host fails preflight with the port in the message.
func TestRunPreflightPortInUse(t *testing.T) {
	fleettest.Need(t, fleet)
	const port = "29517"
	out, err := fleet.Exec(0, "sh", "-c", "/usr/bin/python3 -m http.server "+port+" >/dev/null 2>&1 & echo $!")
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "listener pid %q", out)
	testenv.SignalAtCleanup(t, pid, syscall.SIGKILL, false)
	testenv.WaitFor(t, 10*time.Second, "python http.server to listen on "+port, func() bool {
		ss, _ := fleet.Exec(0, "ss", "-Hltn", "sport = :"+port)
		return strings.Contains(string(ss), ":"+port)
	})

	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: "echo should not run\n", Job: "master_port = " + port})
	d := kit.StartDrover(t, j)
	assert.Equal(t, 1, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	assert.Regexp(t, `preflight on `+regexp.QuoteMeta(kit.HostLabel(0))+`: port `+port+` is not free: .*address already in use`, stderr)
	assert.NotContains(t, stderr, "preflight on "+fleet.Hosts[1].Name, "the rendezvous port is only needed on rank 0's host")
	assert.NotContains(t, d.Stdout.String(), "should not run")
	assert.NotContains(t, stderr, "attempt 2/", "a taken port is not retried")
}

// Done-when 10: a group left by an earlier run (its drover killed, its
// agent alive with the channel still open and no heartbeat) is stopped by
// the next run of the job, which says so.
func TestRunStopsLeftoverGroup(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 1, Script: "echo fresh run\n"})
	h := fleet.ClusterHosts()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	require.NoError(t, err)
	defer tr.Close()
	bin, err := remote.Install(ctx, tr, remote.FindAgents(kit.DroverBinary(t)))
	require.NoError(t, err)

	// What an earlier drover started, whose controller vanished while the
	// channel stayed open: stdin that never ends, no heartbeat.
	pidfile := path.Join(kit.HostHome, j.Workdir, ".drover/pids/worker-0.pid")
	stdin, stdinW := io.Pipe()
	defer stdinW.Close()
	var out transporttest.SyncBuffer
	p, err := tr.Start(ctx, cluster.Cmd{
		Args: []string{bin, "agent", "run", "--grace", "2s", "--pidfile", pidfile, "--job", j.Name, "--",
			"sh", "-c", `echo "old ready"; sleep 1000`},
		Env:    map[string]string{"DROVER_JOB": j.Name},
		Stdin:  stdin,
		Stdout: &out, Stderr: &out,
	})
	require.NoError(t, err)
	oldDone := make(chan error, 1)
	go func() { oldDone <- p.Wait() }()
	testenv.Wait(t, 20*time.Second, "the hand-started agent to come up", func() (bool, string) {
		_, err := kit.HostFile(t, 0, path.Join(j.Workdir, ".drover/pids/worker-0.pid"))
		return err == nil && strings.Contains(out.String(), "old ready"), out.String()
	})
	old := kit.JobProcs(t, j.Name, 0)
	require.Len(t, old, 3, "agent, sh and sleep: %v", old)

	d := kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second))
	stderr := d.Stderr.String()
	assert.Regexp(t, `attempt 1/4: `+regexp.QuoteMeta(fleet.Hosts[0].Name)+`: stopped leftover group \d+ \(sh -c echo "old ready"; sleep 1000\) from job `+j.Name+` started `, stderr)
	assert.Contains(t, d.Stdout.String(), "[worker-0@"+fleet.Hosts[0].Name+"] fresh run\n")
	select {
	case err := <-oldDone:
		var ee *cluster.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 143, ee.Code, "the old group was stopped with SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("the hand-started agent still runs")
	}
	assert.Empty(t, kit.JobProcs(t, j.Name))
}
