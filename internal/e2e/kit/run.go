package kit

import (
	"bytes"
	"errors"
	"fmt"
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

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/sigclean"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// HostHome is where Fleet.Exec sees the login user's home on every host.
const HostHome = "/home/" + fleettest.User

// FleetJob is a job file written for one test: its own inventory (a copy
// of the fleet's, so a test may edit it), code directory and workdir.
type FleetJob struct {
	Name      string // unique per test; every process gets DROVER_JOB=Name
	Dir       string // local: job.toml, inventory.toml, code/, runs/, home/
	Path      string // job.toml
	Inventory string
	Workdir   string // on every host, relative to the home
	LogRoot   string // --log-dir
}

// JobSpec says what a test's job runs.
type JobSpec struct {
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

// NewFleetJob writes the job for spec and returns it.
func NewFleetJob(t *testing.T, spec JobSpec) *FleetJob {
	t.Helper()
	name := strings.Trim(jobNameRE.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	dir := t.TempDir()
	j := &FleetJob{
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
	WriteInventory(t, j.Inventory, hosts)

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

// WriteInventory writes the fleet's hosts as an inventory file, as the
// fleet's own generated one does.
func WriteInventory(t *testing.T, file string, hosts []config.Host) {
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

// RunDir is the single runs/<job>-<start>/ directory of a finished run.
func (j *FleetJob) RunDir(t *testing.T) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*"))
	require.NoError(t, err)
	require.Len(t, m, 1, "one run directory under %s", j.LogRoot)
	return m[0]
}

// LogFile reads runs/<job>-<start>/attempt-<n>/<proc>.log.
func (j *FleetJob) LogFile(t *testing.T, attempt int, proc string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(j.RunDir(t), fmt.Sprintf("attempt-%d", attempt), proc+".log"))
	require.NoError(t, err)
	return string(data)
}

// DroverProc is a running `drover run` controller.
type DroverProc struct {
	Cmd            *exec.Cmd
	Stdout, Stderr transporttest.SyncBuffer
	// Done is closed when drover has exited, with its status in Code.
	Done chan struct{}
	Code int
}

// StartDrover starts `drover run JOB --log-dir ...` with a HOME of its own
// (no ssh config or agent of the machine's user leaks in). Cleanup kills it
// if the test did not wait for it and removes whatever the job left on
// the hosts, so that one failing test does not cascade.
func StartDrover(t *testing.T, j *FleetJob, args ...string) *DroverProc {
	t.Helper()
	return StartDroverArgs(t, j, append([]string{"run", j.Path, "--log-dir", j.LogRoot}, args...)...)
}

// droverEnv is the environment a drover command of j runs with: this
// one's, with j's own HOME and no ssh-agent, so that no ssh config or
// agent of the machine's user leaks in.
func (j *FleetJob) droverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+filepath.Join(j.Dir, "home"))
}

// StartDroverArgs is StartDrover for any drover command line.
func StartDroverArgs(t *testing.T, j *FleetJob, args ...string) *DroverProc {
	t.Helper()
	return StartDroverWrapped(t, j, nil, args...)
}

// StartDroverWrapped runs drover as the last argument of wrap (a command
// that execs it, so that signals reach drover itself).
func StartDroverWrapped(t *testing.T, j *FleetJob, wrap []string, args ...string) *DroverProc {
	t.Helper()
	bin := DroverBinary(t)
	d := &DroverProc{Done: make(chan struct{})}
	argv := append(append(append([]string(nil), wrap...), bin), args...)
	d.Cmd = exec.Command(argv[0], argv[1:]...)
	d.Cmd.Env = j.droverEnv()
	d.Cmd.Stdout, d.Cmd.Stderr = &d.Stdout, &d.Stderr
	// drover starts as from a terminal, with default signal dispositions,
	// also when the suite runs under nohup (which would leave SIGHUP
	// ignored, and drover keeps an ignored SIGHUP ignored).
	sigclean.Command(d.Cmd)
	require.NoError(t, d.Cmd.Start())
	go func() {
		err := d.Cmd.Wait()
		d.Code = d.Cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				d.Code = 128 + int(ws.Signal())
			}
		}
		close(d.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.Done:
		default:
			_ = d.Cmd.Process.Kill()
			<-d.Done
		}
		if t.Failed() {
			t.Logf("drover stdout:\n%s", Tail(d.Stdout.String(), 4000))
			t.Logf("drover stderr:\n%s", d.Stderr.String())
		}
		KillJob(t, j.Name)
	})
	return d
}

func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// Wait waits for drover to exit and returns its exit status (128+n for a
// Signal), failing the test if that takes longer than within.
func (d *DroverProc) Wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-d.Done:
		AssertNoRace(t, d.Stderr.String())
		return d.Code
	case <-time.After(within):
		t.Fatalf("drover still running after %s\nstderr:\n%s", within, d.Stderr.String())
		return -1
	}
}

// Signal sends sig to the controller.
func (d *DroverProc) Signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, d.Cmd.Process.Signal(sig))
}

// WaitOutput waits until drover's stdout (the processes' prefixed output)
// matches re, and returns the first match's submatches.
func (d *DroverProc) WaitOutput(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	testenv.Wait(t, within, "output matching "+re.String(), func() (bool, string) {
		if m = re.FindStringSubmatch(d.Stdout.String()); m != nil {
			return true, ""
		}
		select {
		case <-d.Done:
			t.Fatalf("drover exited %d before printing %s\nstdout:\n%s\nstderr:\n%s", d.Code, re, Tail(d.Stdout.String(), 4000), d.Stderr.String())
		default:
		}
		return false, fmt.Sprintf("\nstdout:\n%s\nstderr:\n%s", Tail(d.Stdout.String(), 4000), d.Stderr.String())
	})
	return m
}

// WaitLines waits until stdout has n lines matching re.
func (d *DroverProc) WaitLines(t *testing.T, re *regexp.Regexp, n int, within time.Duration) [][]string {
	t.Helper()
	var m [][]string
	testenv.Wait(t, within, fmt.Sprintf("%d lines matching %s", n, re), func() (bool, string) {
		if m = re.FindAllStringSubmatch(d.Stdout.String(), -1); len(m) >= n {
			return true, ""
		}
		select {
		case <-d.Done:
			t.Fatalf("drover exited %d with %d of %d lines matching %s\nstdout:\n%s\nstderr:\n%s", d.Code, len(m), n, re, Tail(d.Stdout.String(), 4000), d.Stderr.String())
		default:
		}
		return false, fmt.Sprintf("%d lines\nstdout:\n%s\nstderr:\n%s", len(m), Tail(d.Stdout.String(), 4000), d.Stderr.String())
	})
	return m
}

// AssertNoRace fails the test when a -race drover reported a data race.
func AssertNoRace(t *testing.T, stderr string) {
	t.Helper()
	assert.NotContains(t, stderr, "WARNING: DATA RACE")
}

// HostProc is a live process of a job on a fleet host.
type HostProc struct {
	Host    int
	Pid     int
	Cmdline string
	Env     map[string]string
}

func (p HostProc) String() string {
	return fmt.Sprintf("%s pid %d: %s", fleet.Hosts[p.Host].Name, p.Pid, p.Cmdline)
}

// JobProcs lists the live (not zombie) processes on the given hosts (all
// when none given) of job: its agents (`drover agent run ... --job job`,
// whose own environment holds none of the job's) and every process whose
// environment says DROVER_JOB=job, what the workload started included.
func JobProcs(t *testing.T, job string, hosts ...int) []HostProc {
	t.Helper()
	if len(hosts) == 0 {
		for i := range fleet.Hosts {
			hosts = append(hosts, i)
		}
	}
	var out []HostProc
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
			if env["DROVER_JOB"] != job && !IsAgentOf(cmdline, job) {
				continue
			}
			out = append(out, HostProc{Host: i, Pid: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), Env: env})
		}
	}
	return out
}

// IsAgentOf reports whether cmdline (NUL-separated) is a `drover agent
// run` (or the `drover agent gpu-lease` that holds its GPUs) of job.
func IsAgentOf(cmdline []byte, job string) bool {
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	i := slices.Index(argv, "--job")
	return slices.Contains(argv, "agent") && (slices.Contains(argv, "run") || slices.Contains(argv, "gpu-lease")) && i >= 0 && i+1 < len(argv) && argv[i+1] == job
}

// WaitNoJobProcs waits until no process of job is left on hosts (all when
// none given), failing the test after within with the survivors.
func WaitNoJobProcs(t *testing.T, job string, within time.Duration, hosts ...int) {
	t.Helper()
	testenv.Wait(t, within, "no processes of job "+job, func() (bool, string) {
		left := JobProcs(t, job, hosts...)
		return len(left) == 0, fmt.Sprintf("still running: %v", left)
	})
}

// KillJob SIGKILLs, by pid, whatever a test left of job on the hosts.
func KillJob(t *testing.T, job string) {
	t.Helper()
	for _, p := range JobProcs(t, job) {
		t.Logf("cleanup: killing leftover %v", p)
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
}

// HostFile reads a file under the login home of fleet host i.
func HostFile(t *testing.T, i int, rel string) (string, error) {
	t.Helper()
	out, err := fleet.Exec(i, "cat", path.Join(HostHome, rel))
	return string(out), err
}

// procLines returns the lines of a log or output that match re.
func CountLines(s string, re *regexp.Regexp) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

const SleepForever = `
echo "ready rank=$RANK"
sleep 1000
`

func Atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// HostLabel is how drover's events name fleet host i: "NAME (ADDR)".
func HostLabel(i int) string {
	return fmt.Sprintf("%s (%s)", fleet.Hosts[i].Name, fleet.Hosts[i].Addr)
}

// FleetPrefix is what the fleet's host names start with ("cd" unless a
// DROVER_TESTFLEET_SLOT moved the fleet): host i is FleetPrefix()-hI.
func FleetPrefix() string {
	return strings.TrimSuffix(fleet.Hosts[0].Name, "-h0")
}
