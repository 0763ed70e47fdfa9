package e2e

// Fleet tests of `drover run`: the real drover binary (built once, see
// droverBinary) runs as the controller here and as the agent on four real
// SSH hosts, and the tests disturb the run the way the world does (kill -9,
// Ctrl-C, SIGKILL, a cut cable, a host that moved) and check what is left
// on the hosts, what the processes saw and what drover reported.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/sigclean"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// hostHome is where Fleet.Exec sees the login user's home on every host.
const hostHome = "/home/" + fleettest.User

// fleetJob is a job file written for one test: its own inventory (a copy
// of the fleet's, so a test may edit it), code directory and workdir.
type fleetJob struct {
	Name      string // unique per test; every process gets DROVER_JOB=Name
	Dir       string // local: job.toml, inventory.toml, code/, runs/, home/
	Path      string // job.toml
	Inventory string
	Workdir   string // on every host, relative to the home
	LogRoot   string // --log-dir
}

// jobSpec says what a test's job runs.
type jobSpec struct {
	// Script is code/w.sh; the command is `sh w.sh` unless Command is set.
	Script string
	// Command is the TOML array of the command.
	Command string
	// Hosts is how many fleet hosts the job uses (the first ones); 0: all.
	Hosts int
	// Job holds more [job] lines (framework, max_restarts, ...).
	Job string
}

var jobNameRE = regexp.MustCompile(`[^a-z0-9]+`)

// newFleetJob writes the job for spec and returns it.
func newFleetJob(t *testing.T, spec jobSpec) *fleetJob {
	t.Helper()
	name := strings.Trim(jobNameRE.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	dir := t.TempDir()
	j := &fleetJob{
		Name:      name,
		Dir:       dir,
		Path:      filepath.Join(dir, "job.toml"),
		Inventory: filepath.Join(dir, "inventory.toml"),
		Workdir:   "drover-test/" + name,
		LogRoot:   filepath.Join(dir, "runs"),
	}
	code := filepath.Join(dir, "code")
	require.NoError(t, os.MkdirAll(code, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "home"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(code, "w.sh"), []byte(spec.Script), 0o644))

	hosts := fleet.ClusterHosts()
	if spec.Hosts > 0 {
		hosts = hosts[:spec.Hosts]
	}
	writeInventory(t, j.Inventory, hosts)

	command := spec.Command
	if command == "" {
		command = `["sh", "w.sh"]`
	}
	jobText := fmt.Sprintf(`inventory = %q

[job]
name = %q
command = %s
code = "code"
workdir = %q
%s
`, j.Inventory, name, command, j.Workdir, spec.Job)
	// Short defaults keep the tests fast; a spec may set its own.
	for _, kv := range []string{`stop_grace = "2s"`, `restart_backoff = "200ms"`, `framework = "pytorch"`} {
		if key, _, _ := strings.Cut(kv, " "); !strings.Contains(spec.Job, key+" =") {
			jobText = strings.Replace(jobText, "[job]\n", "[job]\n"+kv+"\n", 1)
		}
	}
	require.NoError(t, os.WriteFile(j.Path, []byte(jobText), 0o644))
	return j
}

// writeInventory writes the fleet's hosts as an inventory file, as the
// fleet's own generated one does.
func writeInventory(t *testing.T, file string, hosts []config.Host) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for _, h := range hosts {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\n", h.Name, h.Address)
		if h.Spare {
			b.WriteString("spare = true\n")
		}
		if h.ProxyJump != "" {
			fmt.Fprintf(&b, "proxy_jump = %q\n", h.ProxyJump)
		}
	}
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o644))
}

// runDir is the single runs/<job>-<start>/ directory of a finished run.
func (j *fleetJob) runDir(t *testing.T) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*"))
	require.NoError(t, err)
	require.Len(t, m, 1, "one run directory under %s", j.LogRoot)
	return m[0]
}

// logFile reads runs/<job>-<start>/attempt-<n>/<proc>.log.
func (j *fleetJob) logFile(t *testing.T, attempt int, proc string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(j.runDir(t), fmt.Sprintf("attempt-%d", attempt), proc+".log"))
	require.NoError(t, err)
	return string(data)
}

// droverProc is a running `drover run` controller.
type droverProc struct {
	cmd            *exec.Cmd
	stdout, stderr transporttest.SyncBuffer
	done           chan struct{}
	code           int
}

// startDrover starts `drover run JOB --log-dir ...` with a HOME of its own
// (no ssh config or agent of the machine's user leaks in). Cleanup kills it
// if the test did not wait for it and removes whatever the job left on
// the hosts, so that one failing test does not cascade.
func startDrover(t *testing.T, j *fleetJob, args ...string) *droverProc {
	t.Helper()
	return startDroverArgs(t, j, append([]string{"run", j.Path, "--log-dir", j.LogRoot}, args...)...)
}

// startDroverArgs is startDrover for any drover command line.
func startDroverArgs(t *testing.T, j *fleetJob, args ...string) *droverProc {
	t.Helper()
	return startDroverWrapped(t, j, nil, args...)
}

// startDroverWrapped runs drover as the last argument of wrap (a command
// that execs it, so that signals reach drover itself).
func startDroverWrapped(t *testing.T, j *fleetJob, wrap []string, args ...string) *droverProc {
	t.Helper()
	bin := droverBinary(t)
	d := &droverProc{done: make(chan struct{})}
	argv := append(append(append([]string(nil), wrap...), bin), args...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") {
			env = append(env, kv)
		}
	}
	d.cmd.Env = append(env, "HOME="+filepath.Join(j.Dir, "home"))
	d.cmd.Stdout, d.cmd.Stderr = &d.stdout, &d.stderr
	// drover starts as from a terminal, with default signal dispositions,
	// also when the suite runs under nohup (which would leave SIGHUP
	// ignored, and drover keeps an ignored SIGHUP ignored).
	sigclean.Command(d.cmd)
	require.NoError(t, d.cmd.Start())
	go func() {
		err := d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				d.code = 128 + int(ws.Signal())
			}
		}
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("drover stdout:\n%s", tail(d.stdout.String(), 4000))
			t.Logf("drover stderr:\n%s", d.stderr.String())
		}
		killJob(t, j.Name)
	})
	return d
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// wait waits for drover to exit and returns its exit status (128+n for a
// signal), failing the test if that takes longer than within.
func (d *droverProc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-d.done:
		assertNoRace(t, d.stderr.String())
		return d.code
	case <-time.After(within):
		t.Fatalf("drover still running after %s\nstderr:\n%s", within, d.stderr.String())
		return -1
	}
}

// signal sends sig to the controller.
func (d *droverProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(sig))
}

// waitOutput waits until drover's stdout (the processes' prefixed output)
// matches re, and returns the first match's submatches.
func (d *droverProc) waitOutput(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	testenv.Wait(t, within, "output matching "+re.String(), func() (bool, string) {
		if m = re.FindStringSubmatch(d.stdout.String()); m != nil {
			return true, ""
		}
		select {
		case <-d.done:
			t.Fatalf("drover exited %d before printing %s\nstdout:\n%s\nstderr:\n%s", d.code, re, tail(d.stdout.String(), 4000), d.stderr.String())
		default:
		}
		return false, fmt.Sprintf("\nstdout:\n%s\nstderr:\n%s", tail(d.stdout.String(), 4000), d.stderr.String())
	})
	return m
}

// waitLines waits until stdout has n lines matching re.
func (d *droverProc) waitLines(t *testing.T, re *regexp.Regexp, n int, within time.Duration) [][]string {
	t.Helper()
	var m [][]string
	testenv.Wait(t, within, fmt.Sprintf("%d lines matching %s", n, re), func() (bool, string) {
		if m = re.FindAllStringSubmatch(d.stdout.String(), -1); len(m) >= n {
			return true, ""
		}
		select {
		case <-d.done:
			t.Fatalf("drover exited %d with %d of %d lines matching %s\nstdout:\n%s\nstderr:\n%s", d.code, len(m), n, re, tail(d.stdout.String(), 4000), d.stderr.String())
		default:
		}
		return false, fmt.Sprintf("%d lines\nstdout:\n%s\nstderr:\n%s", len(m), tail(d.stdout.String(), 4000), d.stderr.String())
	})
	return m
}

// assertNoRace fails the test when a -race drover reported a data race.
func assertNoRace(t *testing.T, stderr string) {
	t.Helper()
	assert.NotContains(t, stderr, "WARNING: DATA RACE")
}

// hostProc is a live process of a job on a fleet host.
type hostProc struct {
	Host    int
	Pid     int
	Cmdline string
	Env     map[string]string
}

func (p hostProc) String() string {
	return fmt.Sprintf("%s pid %d: %s", fleet.Hosts[p.Host].Name, p.Pid, p.Cmdline)
}

// jobProcs lists the live (not zombie) processes on the given hosts (all
// when none given) of job: its agents (`drover agent run ... --job job`,
// whose own environment holds none of the job's) and every process whose
// environment says DROVER_JOB=job, what the workload started included.
func jobProcs(t *testing.T, job string, hosts ...int) []hostProc {
	t.Helper()
	if len(hosts) == 0 {
		for i := range fleet.Hosts {
			hosts = append(hosts, i)
		}
	}
	var out []hostProc
	for _, i := range hosts {
		pids, err := fleet.Pids(i)
		require.NoError(t, err)
		for _, pid := range pids {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue // gone meanwhile
			}
			// State is the field after "(comm)".
			if k := bytes.LastIndexByte(stat, ')'); k < 0 || k+2 >= len(stat) || stat[k+2] == 'Z' {
				continue
			}
			envData, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				continue
			}
			env := map[string]string{}
			for _, kv := range bytes.Split(envData, []byte{0}) {
				if k, v, ok := strings.Cut(string(kv), "="); ok {
					env[k] = v
				}
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if env["DROVER_JOB"] != job && !isAgentOf(cmdline, job) {
				continue
			}
			out = append(out, hostProc{Host: i, Pid: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), Env: env})
		}
	}
	return out
}

// isAgentOf reports whether cmdline (NUL-separated) is a `drover agent
// run` (or the `drover agent gpu-lease` that holds its GPUs) of job.
func isAgentOf(cmdline []byte, job string) bool {
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	i := slices.Index(argv, "--job")
	return slices.Contains(argv, "agent") && (slices.Contains(argv, "run") || slices.Contains(argv, "gpu-lease")) && i >= 0 && i+1 < len(argv) && argv[i+1] == job
}

// waitNoJobProcs waits until no process of job is left on hosts (all when
// none given), failing the test after within with the survivors.
func waitNoJobProcs(t *testing.T, job string, within time.Duration, hosts ...int) {
	t.Helper()
	testenv.Wait(t, within, "no processes of job "+job, func() (bool, string) {
		left := jobProcs(t, job, hosts...)
		return len(left) == 0, fmt.Sprintf("still running: %v", left)
	})
}

// killJob SIGKILLs, by pid, whatever a test left of job on the hosts.
func killJob(t *testing.T, job string) {
	t.Helper()
	for _, p := range jobProcs(t, job) {
		t.Logf("cleanup: killing leftover %v", p)
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
}

// hostFile reads a file under the login home of fleet host i.
func hostFile(t *testing.T, i int, rel string) (string, error) {
	t.Helper()
	out, err := fleet.Exec(i, "cat", path.Join(hostHome, rel))
	return string(out), err
}

// procLines returns the lines of a log or output that match re.
func countLines(s string, re *regexp.Regexp) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// Done-when 1: kill -9 of one training process mid-run stops and restarts
// the whole group; the processes see DROVER_RESTART_COUNT=1 and the job
// succeeds.
func TestRunKill9RestartsGroup(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT pid=$$"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
sleep 0.5
echo "done rank=$RANK restart=$DROVER_RESTART_COUNT"
`, Job: "max_restarts = 3"})
	d := startDrover(t, j)
	starts := d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-(\d)@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] start rank=\d restart=0 pid=(\d+)$`), 4, 60*time.Second)

	// kill -9 worker-2's shell, checked to be the job's process first.
	var victim int
	for _, m := range starts {
		if m[1] == "2" {
			victim, _ = strconv.Atoi(m[2])
		}
	}
	var found bool
	for _, p := range jobProcs(t, j.Name, 2) {
		if p.Pid == victim {
			found = true
			assert.Equal(t, "0", p.Env["DROVER_RESTART_COUNT"])
		}
	}
	require.True(t, found, "pid %d printed by worker-2 is not a process of the job on "+fleet.Hosts[2].Name, victim)
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))

	require.Equal(t, 0, d.wait(t, 60*time.Second), "stderr:\n%s", d.stderr.String())
	stderr := d.stderr.String()
	assert.Contains(t, stderr, "worker-2@"+fleet.Hosts[2].Name+" exited 137 (SIGKILL); stopping 3 process(es)")
	assert.Contains(t, stderr, "attempt 2/4: restarting the whole group in 200ms")
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded")
	for i := range 4 {
		proc := fmt.Sprintf("worker-%d", i)
		// The first attempt's processes all ran with 0 and were stopped
		// before the second started; every one ran again with 1.
		first := j.logFile(t, 1, proc)
		assert.Contains(t, first, fmt.Sprintf("start rank=%d restart=0 ", i), proc)
		assert.NotContains(t, first, "done rank", "%s finished in the first attempt, so the group was not stopped", proc)
		second := j.logFile(t, 2, proc)
		assert.Contains(t, second, fmt.Sprintf("start rank=%d restart=1 ", i), proc)
		assert.Contains(t, second, fmt.Sprintf("done rank=%d restart=1\n", i), proc)
		assert.Regexp(t, fmt.Sprintf(`(?m)^%s\s+%s\s+2\s+0\s`, proc, fleet.Hosts[i].Name), stderr, "summary row")
	}
	assert.Contains(t, stderr, "succeeded after 2 attempt(s)")
	assert.Empty(t, jobProcs(t, j.Name), "nothing of the job is left once drover returned")
}

// Done-when 2: a process that fails every time makes drover exit 1 after
// max_restarts, with the summary table on stderr.
func TestRunFailsAfterMaxRestarts(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
echo "attempt restart=$DROVER_RESTART_COUNT rank=$RANK"
if [ "$RANK" = 1 ]; then echo "broken" >&2; exit 3; fi
sleep 1000
`, Job: "max_restarts = 2"})
	d := startDrover(t, j)
	require.Equal(t, 1, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	for n := 1; n <= 3; n++ {
		assert.Contains(t, stderr, fmt.Sprintf("attempt %d/3: worker-1@"+fleet.Hosts[1].Name+" exited 3: stderr: broken; stopping 1 process(es)", n))
		// stdout and stderr are two pipes: their relative order is lost.
		log := j.logFile(t, n, "worker-1")
		assert.ElementsMatch(t, []string{fmt.Sprintf("attempt restart=%d rank=1", n-1), "broken"}, strings.Split(strings.TrimSuffix(log, "\n"), "\n"))
	}
	assert.NotContains(t, stderr, "attempt 4/")
	assert.Regexp(t, `(?m)^PROCESS\s+HOST\s+ATTEMPTS\s+EXIT\s+DURATION$`, stderr)
	assert.Regexp(t, `(?m)^worker-0\s+`+regexp.QuoteMeta(fleet.Hosts[0].Name)+`\s+3\s+143 \(SIGTERM\)\s+\S+$`, stderr)
	assert.Regexp(t, `(?m)^worker-1\s+`+regexp.QuoteMeta(fleet.Hosts[1].Name)+`\s+3\s+3\s+\S+$`, stderr)
	assert.Contains(t, stderr, "failed after 3 attempt(s): worker-1@"+fleet.Hosts[1].Name+" exited 3: stderr: broken; no restarts left (max_restarts = 2); logs in "+j.runDir(t))
	_, err := os.Stat(filepath.Join(j.runDir(t), "attempt-4"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Empty(t, jobProcs(t, j.Name))
}

const sleepForever = `
echo "ready rank=$RANK"
sleep 1000
`

// Done-when 3: SIGKILL to drover itself leaves no process of the job on
// any host within stop_grace and a few seconds.
func TestRunControllerSIGKILLLeavesNothing(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Script: sleepForever})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] ready rank=\d$`), 4, 60*time.Second)
	require.Len(t, jobProcs(t, j.Name), 4*3, "agent, sh and sleep on each host")
	d.signal(t, syscall.SIGKILL)
	assert.Equal(t, 128+int(syscall.SIGKILL), d.wait(t, 5*time.Second))
	waitNoJobProcs(t, j.Name, 2*time.Second+8*time.Second)
}

// Done-when 4: Ctrl-C stops every process gracefully and drover exits 130.
func TestRunInterrupt(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Script: `
trap 'echo "rank $RANK got TERM"; exit 143' TERM
echo "ready rank=$RANK"
sleep 1000 &
wait
`})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] ready rank=\d$`), 4, 60*time.Second)
	d.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, d.wait(t, 2*time.Second+10*time.Second))
	stderr := d.stderr.String()
	assert.Contains(t, stderr, "drover: interrupt: stopping every process (again to kill at once)")
	assert.Contains(t, stderr, "attempt 1/4: interrupted; stopping 4 process(es)")
	assert.Contains(t, stderr, "interrupted in attempt 1; logs in "+j.runDir(t))
	assert.NotContains(t, stderr, "killing", "the processes stopped within the grace period")
	for i := range 4 {
		// The workload saw the graceful stop and had time to say so.
		assert.Contains(t, j.logFile(t, 1, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("rank %d got TERM\n", i))
	}
	waitNoJobProcs(t, j.Name, 3*time.Second)
}

// Done-when 4, second part: a second Ctrl-C kills at once, without waiting
// out a stop_grace that the workload ignores SIGTERM through.
func TestRunSecondInterruptKills(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
trap '' TERM
echo "ready rank=$RANK"
sleep 1000
`, Job: `stop_grace = "60s"`})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] ready rank=\d$`), 2, 60*time.Second)
	d.signal(t, syscall.SIGINT)
	// The first Ctrl-C asks for a graceful stop, which the workload ignores.
	testenv.Wait(t, 10*time.Second, "a stop after the first SIGINT", func() (bool, string) {
		return strings.Contains(d.stderr.String(), "interrupted; stopping 2 process(es)"), d.stderr.String()
	})
	time.Sleep(time.Second)
	require.Len(t, jobProcs(t, j.Name), 2*3, "the workload ignores SIGTERM")
	d.signal(t, syscall.SIGINT)
	require.Equal(t, exitInterrupted, d.wait(t, 10*time.Second), "a second Ctrl-C does not wait for the 60s grace")
	assert.Contains(t, d.stderr.String(), "killing every process now")
	for i := range 2 {
		assert.Regexp(t, fmt.Sprintf(`(?m)^worker-%d\s+%s\s+1\s+137 \(SIGKILL\)`, i, fleet.Hosts[i].Name), d.stderr.String())
	}
	waitNoJobProcs(t, j.Name, 3*time.Second)
}

// Done-when 5: a host whose link is cut mid-run gets the group stopped on
// the other hosts; once the link is back, the restart succeeds.
func TestRunHostCutAndHealed(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 2\nhost_wait = \"60s\""})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] start rank=\d restart=0$`), 4, 60*time.Second)
	require.NoError(t, fleet.Cut(3))
	healed := false
	t.Cleanup(func() {
		if !healed {
			assert.NoError(t, fleet.Heal(3))
		}
	})
	// Keepalives notice the loss within seconds; the other hosts' first
	// attempt is stopped (stop_grace 2s) right after.
	waitNoJobProcs(t, j.Name, 30*time.Second, 0, 1, 2)
	// The cut host's agent hears no heartbeat and stops its group too.
	waitNoJobProcs(t, j.Name, 15*time.Second, 3)
	stderr := d.stderr.String()
	assert.Regexp(t, `worker-3@`+regexp.QuoteMeta(fleet.Hosts[3].Name)+`: `+regexp.QuoteMeta(hostLabel(3))+` lost: .*connection lost`, stderr)
	// drover is now waiting for cd-h3 (host_wait 60s).
	testenv.Wait(t, 30*time.Second, "drover to wait for "+fleet.Hosts[3].Name, func() (bool, string) {
		return strings.Contains(d.stderr.String(), hostLabel(3)+" unreachable, waiting up to 1m0s for it"), d.stderr.String()
	})
	require.NoError(t, fleet.Heal(3))
	healed = true
	require.Equal(t, 0, d.wait(t, 60*time.Second))
	stderr = d.stderr.String()
	assert.Contains(t, stderr, hostLabel(3)+" is back")
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded", "a lost host adds an attempt to max_restarts + 1")
	for i := range 4 {
		assert.Contains(t, j.logFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("start rank=%d restart=1\ndone rank=%d\n", i, i))
	}
	assert.Empty(t, jobProcs(t, j.Name))
}

// A host that stays unreachable past host_wait is replaced by the
// inventory's spare, which takes over its ranks; the job then succeeds.
func TestRunHostReplacedBySpare(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Script: `
echo "start rank=$RANK world=$WORLD_SIZE restart=$DROVER_RESTART_COUNT host=$DROVER_HOST"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then sleep 1000; fi
echo "done rank=$RANK"
`, Job: "max_restarts = 2\nhost_wait = \"3s\""})
	hosts := fleet.ClusterHosts()
	hosts[3].Spare = true
	writeInventory(t, j.Inventory, hosts)

	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h[0-2]\] start rank=\d world=3 restart=0 `), 3, 60*time.Second)
	require.NoError(t, fleet.Cut(2))
	t.Cleanup(func() { assert.NoError(t, fleet.Heal(2)) })

	require.Equal(t, 0, d.wait(t, 90*time.Second), d.stderr.String())
	stderr := d.stderr.String()
	assert.Regexp(t, regexp.QuoteMeta(hostLabel(2))+` unreachable: .*; replaced by spare `+regexp.QuoteMeta(hostLabel(3)), stderr)
	assert.Contains(t, stderr, "attempt 2/4: job "+j.Name+" succeeded", "a lost host adds an attempt to max_restarts + 1")
	second := j.logFile(t, 2, "worker-2")
	assert.Contains(t, second, "start rank=2 world=3 restart=1 host="+fleet.Hosts[3].Name+"\ndone rank=2\n", "the spare runs the lost host's rank")
	for i := range 2 {
		assert.Contains(t, j.logFile(t, 2, fmt.Sprintf("worker-%d", i)), fmt.Sprintf("start rank=%d world=3 restart=1 host=%s\n", i, fleet.Hosts[i].Name))
	}
	// The cut host's agent hears no heartbeat and stops its group itself.
	waitNoJobProcs(t, j.Name, 20*time.Second, 2)
	assert.Empty(t, jobProcs(t, j.Name))
}

// Issue 19: a host that refuses drover's key when the group restarts (its
// key was revoked, authorized_keys replaced) fails the run at once: waiting
// host_wait (here 10 minutes) for it could not help. Before authentication
// errors had a type of their own, this one was taken for an unreachable host.
func TestRunAuthFailureAtRestartFailsAtOnce(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$RANK" = 1 ]; then
	while [ ! -e fail-now ]; do sleep 0.1; done
	exit 1
fi
sleep 1000
`, Job: "max_restarts = 2\nhost_wait = \"10m\""})
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] start rank=\d restart=0$`), 2, 60*time.Second)

	// From the next attempt on, drover logs in with a key no host accepts.
	key := filepath.Join(t.TempDir(), "id_other")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput()
	require.NoError(t, err, "%s", out)
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	edited := strings.Replace(string(inv), fmt.Sprintf("identity_file = %q", fleet.KeyFile), fmt.Sprintf("identity_file = %q", key), 1)
	require.NotEqual(t, string(inv), edited)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(edited), 0o644))
	_, err = fleet.Exec(1, "touch", path.Join(hostHome, j.Workdir, "fail-now"))
	require.NoError(t, err)

	require.Equal(t, exitFailed, d.wait(t, 60*time.Second), "drover waits host_wait for a host that refuses its key")
	stderr := d.stderr.String()
	assert.Contains(t, stderr, `auth failed for user "drovertest": tried `+key)
	assert.NotContains(t, stderr, "waiting up to")
	assert.Empty(t, jobProcs(t, j.Name))
}

// Done-when 6: a host that moved to a new address, with the inventory
// edited during the first attempt, is reached at the new address when the
// group restarts (and rank 0's new address becomes MASTER_ADDR).
func TestRunHostMovedBetweenAttempts(t *testing.T) {
	fleettest.Need(t, fleet)
	newAddr := fleet.SpareAddr(60)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
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
	d := startDrover(t, j)
	d.waitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@`+regexp.QuoteMeta(fleetPrefix())+`-h\d\] start rank=\d restart=0 master=`+regexp.QuoteMeta(oldAddr)+` `), 2, 60*time.Second)

	// cd-h0 (rank 0) comes back with a new address; the user edits the
	// inventory; then rank 1 fails so that the group restarts.
	require.NoError(t, fleet.Move(0, newAddr))
	t.Cleanup(func() { assert.NoError(t, fleet.Move(0, oldAddr)) })
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	edited := strings.Replace(string(inv), fmt.Sprintf("address = %q", oldAddr), fmt.Sprintf("address = %q", newAddr), 1)
	require.NotEqual(t, string(inv), edited)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(edited), 0o644))
	_, err = fleet.Exec(1, "touch", path.Join(hostHome, j.Workdir, "fail-now"))
	require.NoError(t, err)

	require.Equal(t, 0, d.wait(t, 90*time.Second))
	first := j.logFile(t, 1, "worker-1")
	assert.Contains(t, first, "failing on purpose\n")
	for i := range 2 {
		second := j.logFile(t, 2, fmt.Sprintf("worker-%d", i))
		assert.Contains(t, second, fmt.Sprintf("start rank=%d restart=1 master=%s ", i, newAddr), "MASTER_ADDR is rank 0's new address")
		assert.Contains(t, second, fmt.Sprintf("done rank=%d\n", i))
	}
	// sshd's SSH_CONNECTION names the address drover connected to.
	assert.Regexp(t, ` conn=\S+ \d+ `+regexp.QuoteMeta(newAddr)+` 22\n`, j.logFile(t, 2, "worker-0"))
	assert.Regexp(t, ` conn=\S+ \d+ `+regexp.QuoteMeta(oldAddr)+` 22\n`, j.logFile(t, 1, "worker-0"))
	assert.Empty(t, jobProcs(t, j.Name))
}

// Done-when 7: a TensorFlow job whose parameter server never exits
// succeeds when the chief and workers are done, and the ps is stopped.
func TestRunTensorFlowStopsPS(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Script: `
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
	d := startDrover(t, j)
	require.Equal(t, 0, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	assert.Contains(t, stderr, "success policy met (all-workers); stopping 1 process(es)")
	assert.Regexp(t, `(?m)^ps-0\s+`+regexp.QuoteMeta(fleetPrefix())+`-h\d\s+1\s+143 \(SIGTERM\)`, stderr)
	for _, p := range []string{"chief-0", "worker-0", "worker-1"} {
		assert.Regexp(t, `(?m)^`+p+`\s+`+regexp.QuoteMeta(fleetPrefix())+`-h\d\s+1\s+0\s`, stderr)
		role, idx, _ := strings.Cut(p, "-")
		assert.Contains(t, j.logFile(t, 1, p), role+" "+idx+" finished\n")
	}
	assert.Contains(t, stderr, "succeeded after 1 attempt(s)")
	assert.Empty(t, jobProcs(t, j.Name), "the ps's sleep is gone")
}

// Done-when 8: every line printed reaches the log file exactly once and
// whole, and the terminal shows every line with its [proc@host] prefix.
func TestRunLogsEveryLine(t *testing.T) {
	fleettest.Need(t, fleet)
	const n = 5000
	j := newFleetJob(t, jobSpec{Hosts: 2, Command: `["/usr/bin/python3", "spew.py"]`})
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
	d := startDrover(t, j)
	require.Equal(t, 0, d.wait(t, 60*time.Second))

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
			assert.Len(t, l, len("out 0 00000  end")+atoi(rank)*37+50, "%s: %q", what, l)
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
		log := j.logFile(t, 1, "worker-"+rank)
		require.True(t, strings.HasSuffix(log, "end\n"), "log ends with a whole line")
		checkLines("log worker-"+rank, strings.Split(strings.TrimSuffix(log, "\n"), "\n"), rank)

		prefix := fmt.Sprintf("[worker-%d@%s] ", i, fleet.Hosts[i].Name)
		var term []string
		sc := bufio.NewScanner(strings.NewReader(d.stdout.String()))
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

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Done-when 9: preflight stops a job before anything starts when the
// program is missing on the hosts, naming host and program.
func TestRunPreflightMissingProgram(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 2, Command: `["no-such-trainer", "--epochs", "1"]`, Job: "max_restarts = 3"})
	d := startDrover(t, j)
	assert.Equal(t, 1, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	for i := range 2 {
		assert.Regexp(t, `preflight on `+regexp.QuoteMeta(hostLabel(i))+`: program no-such-trainer: .*not found`, stderr)
	}
	assert.NotContains(t, stderr, "started", "nothing was started")
	assert.NotContains(t, stderr, "PROCESS", "no summary table without processes")
	assert.Contains(t, stderr, "failed after 1 attempt(s): preflight on "+fleet.Hosts[0].Name)
	assert.NotContains(t, stderr, "attempt 2/", "a setup failure is not retried")
	_, err := os.Stat(filepath.Join(j.runDir(t), "attempt-1"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no process log was opened")
}

// Issue 37: a fleet met for the first time (an empty known_hosts) is named
// whole: every host with the key it presented, one ssh-keyscan line for
// them all, said once, a line per host (no literal "\n").
func TestRunEmptyKnownHostsNamesEveryHost(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 3, Script: sleepForever})
	empty := filepath.Join(j.Dir, "known_hosts")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	inv, err := os.ReadFile(j.Inventory)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(j.Inventory, []byte(strings.Replace(string(inv), fmt.Sprintf("%q", fleet.KnownHosts), fmt.Sprintf("%q", empty), 1)), 0o644))
	d := startDrover(t, j)
	assert.Equal(t, exitFailed, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	t.Logf("drover stderr:\n%s", stderr)
	for i := range 3 {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(fleet.Hosts[i].Name+" ("+fleet.Hosts[i].Addr+":22): presented ")+`\S+ key SHA256:`, stderr, "host %d on a line of its own", i)
	}
	assert.Equal(t, 1, strings.Count(stderr, "ssh-keyscan"), "one ssh-keyscan line:\n%s", stderr)
	assert.Contains(t, stderr, "`ssh-keyscan "+fleet.Hosts[0].Addr+" "+fleet.Hosts[1].Addr+" "+fleet.Hosts[2].Addr+" >> "+empty+"`")
	assert.Equal(t, 1, strings.Count(stderr, "host keys of 3 hosts unknown"), "said once:\n%s", stderr)
	assert.NotContains(t, stderr, `\n`)
	assert.Empty(t, jobProcs(t, j.Name))
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

	j := newFleetJob(t, jobSpec{Hosts: 2, Script: "echo should not run\n", Job: "master_port = " + port})
	d := startDrover(t, j)
	assert.Equal(t, 1, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	assert.Regexp(t, `preflight on `+regexp.QuoteMeta(hostLabel(0))+`: port `+port+` is not free: .*address already in use`, stderr)
	assert.NotContains(t, stderr, "preflight on "+fleet.Hosts[1].Name, "the rendezvous port is only needed on rank 0's host")
	assert.NotContains(t, d.stdout.String(), "should not run")
	assert.NotContains(t, stderr, "attempt 2/", "a taken port is not retried")
}

// Done-when 10: a group left by an earlier run (its drover killed, its
// agent alive with the channel still open and no heartbeat) is stopped by
// the next run of the job, which says so.
func TestRunStopsLeftoverGroup(t *testing.T) {
	fleettest.Need(t, fleet)
	j := newFleetJob(t, jobSpec{Hosts: 1, Script: "echo fresh run\n"})
	h := fleet.ClusterHosts()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	require.NoError(t, err)
	defer tr.Close()
	bin, err := remote.Install(ctx, tr, remote.FindAgents(droverBinary(t)))
	require.NoError(t, err)

	// What an earlier drover started, whose controller vanished while the
	// channel stayed open: stdin that never ends, no heartbeat.
	pidfile := path.Join(hostHome, j.Workdir, ".drover/pids/worker-0.pid")
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
		_, err := hostFile(t, 0, path.Join(j.Workdir, ".drover/pids/worker-0.pid"))
		return err == nil && strings.Contains(out.String(), "old ready"), out.String()
	})
	old := jobProcs(t, j.Name, 0)
	require.Len(t, old, 3, "agent, sh and sleep: %v", old)

	d := startDrover(t, j)
	require.Equal(t, 0, d.wait(t, 60*time.Second))
	stderr := d.stderr.String()
	assert.Regexp(t, `attempt 1/4: `+regexp.QuoteMeta(fleet.Hosts[0].Name)+`: stopped leftover group \d+ \(sh -c echo "old ready"; sleep 1000\) from job `+j.Name+` started `, stderr)
	assert.Contains(t, d.stdout.String(), "[worker-0@"+fleet.Hosts[0].Name+"] fresh run\n")
	select {
	case err := <-oldDone:
		var ee *cluster.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 143, ee.Code, "the old group was stopped with SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("the hand-started agent still runs")
	}
	assert.Empty(t, jobProcs(t, j.Name))
}

// hostLabel is how drover's events name fleet host i: "NAME (ADDR)".
func hostLabel(i int) string {
	return fmt.Sprintf("%s (%s)", fleet.Hosts[i].Name, fleet.Hosts[i].Addr)
}

// fleetPrefix is what the fleet's host names start with ("cd" unless a
// DROVER_TESTFLEET_SLOT moved the fleet): host i is fleetPrefix()-hI.
func fleetPrefix() string {
	return strings.TrimSuffix(fleet.Hosts[0].Name, "-h0")
}
