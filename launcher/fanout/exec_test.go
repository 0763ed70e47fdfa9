package fanout

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

var updateExec = flag.Bool("update-exec", false, "rewrite testdata/golden/exec_summary.txt")

func execLocalHost(name string) config.Host {
	return config.Host{Name: name, Address: "local", Transport: config.TransportLocal}
}

// sortedLines makes output from concurrent hosts comparable.
func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	sort.Strings(lines)
	return lines
}

func TestExecLocal(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	hosts := []config.Host{execLocalHost("a"), execLocalHost("b"), execLocalHost("c")}
	var stdout, stderr bytes.Buffer
	results := Exec(context.Background(), hosts, ExecOptions{
		Args:   []string{"sh", "-c", `echo "one $V"; echo warn >&2; printf 'no newline'; exit "$1"`, "sh", "3"},
		Env:    map[string]string{"V": "it's $(x)"},
		Stdout: &stdout,
		Stderr: &stderr,
	})
	require.Len(t, results, 3)
	for i, r := range results {
		assert.Equal(t, hosts[i].Name, r.Host)
		assert.Equal(t, 3, r.Code)
	}
	assert.Equal(t, []string{
		"[a] no newline", "[a] one it's $(x)",
		"[b] no newline", "[b] one it's $(x)",
		"[c] no newline", "[c] one it's $(x)",
	}, sortedLines(stdout.String()))
	assert.Equal(t, []string{"[a] warn", "[b] warn", "[c] warn"}, sortedLines(stderr.String()))
	assert.Equal(t, 3, WorstExitCode(results))
}

func TestExecWorstCodeAndSummary(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	hosts := []config.Host{
		execLocalHost("ok"),
		// Nothing listens on port 1: a connection failure counts as 255.
		{Name: "down", Address: "127.0.0.1", Port: 1, Transport: config.TransportSSH, User: "nobody"},
	}
	var stdout bytes.Buffer
	results := Exec(context.Background(), hosts, ExecOptions{
		Args:   []string{"echo", "hi"},
		Dial:   cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none", ConnectTimeout: 5 * time.Second},
		Stdout: &stdout,
	})
	assert.Equal(t, "[ok] hi\n", stdout.String())
	assert.Equal(t, 0, results[0].Code)
	assert.NoError(t, results[0].Err)
	assert.Equal(t, ExitConnectFailed, results[1].Code)
	assert.Contains(t, results[1].Err.Error(), "connect to down (127.0.0.1:1): connection refused")
	assert.Equal(t, 255, WorstExitCode(results))
}

func TestWriteExecSummary(t *testing.T) {
	results := []ExecResult{
		{Host: "h0", Code: 0},
		{Host: "h1", Code: 1, Err: &cluster.ExitError{Host: "h1", Code: 1}},
		{Host: "h2", Code: 137, Err: &cluster.ExitError{Host: "h2", Code: 137, Signal: "KILL"}},
		{Host: "h3", Code: 255, Err: fmt.Errorf("connect to h3 (10.0.0.13:22): timed out after 10s")},
	}
	var b bytes.Buffer
	require.NoError(t, WriteExecSummary(&b, results))
	golden := filepath.Join("testdata", "golden", "exec_summary.txt")
	if *updateExec {
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())

	b.Reset()
	require.NoError(t, WriteExecSummary(&b, results[:1]))
	assert.Empty(t, b.String(), "no summary when every host succeeded")
}

// TestExecFleet fans out to 8 real SSH hosts. It brings up its own fleet
// (outside TestMain, on addresses .100-.107 of the launcher subnet) so it
// does not depend on how the rest of this package's tests use the fleet.
func TestExecFleet(t *testing.T) {
	fleet := fleettest.NeedUp(t, fleettest.Options{Name: "ex", N: 8, Subnet: 14, First: 100})

	var stdout, stderr bytes.Buffer
	results := Exec(context.Background(), fleet.ClusterHosts(), ExecOptions{
		Args:   []string{"sh", "-c", `echo "$(hostname) says $1"; case $(hostname) in *-h3) echo bad >&2; exit 7;; esac`, "sh", "hi there"},
		Dial:   cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"},
		Stdout: &stdout, Stderr: &stderr,
	})
	require.Len(t, results, 8)
	var want []string
	for i, r := range results {
		name := fleet.Hosts[i].Name
		want = append(want, fmt.Sprintf("[%s] %s says hi there", name, name))
		assert.Equal(t, name, r.Host)
		if i == 3 {
			assert.Equal(t, 7, r.Code)
		} else {
			assert.Equal(t, 0, r.Code, "%s: %v", name, r.Err)
		}
	}
	assert.Equal(t, want, sortedLines(stdout.String()))
	assert.Equal(t, "["+fleet.Hosts[3].Name+"] bad\n", stderr.String())
	assert.Equal(t, 7, WorstExitCode(results))
	var sum bytes.Buffer
	require.NoError(t, WriteExecSummary(&sum, results))
	assert.Equal(t, "drover exec: 1 of 8 hosts failed:\n  "+fleet.Hosts[3].Name+": exited 7\n", sum.String())

	// Closing an SSH channel leaves its command running: an interrupted
	// Exec must stop it, with real signals through real sshd.
	t.Run("Interrupt", func(t *testing.T) {
		testExecInterrupt(t, fleet.ClusterHosts(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	})
	t.Run("Timeout", func(t *testing.T) {
		testExecTimeout(t, fleet.ClusterHosts(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	})
}

// One argument is a shell line, as with ssh and pdsh; several are argv,
// never word-split or expanded.
func TestExecShellLineOrArgs(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	hosts := []config.Host{execLocalHost("a")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"line", []string{`echo "$V" | tr a-z A-Z; echo *`}, "[a] IT'S\n[a] *\n"},
		{"args", []string{"echo", "$V | tr a-z A-Z;", "*"}, "[a] $V | tr a-z A-Z; *\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			// An empty home: the line's * matches nothing and stays *.
			results := Exec(context.Background(), hosts, ExecOptions{Args: tc.args, Env: map[string]string{"V": "it's"}, Stdout: &stdout})
			require.NoError(t, results[0].Err)
			assert.Equal(t, tc.want, stdout.String())
		})
	}
}

// lineWaiter is an io.Writer that counts lines, so a test can wait until
// every host's command has started.
type lineWaiter struct {
	transporttest.SyncBuffer
}

func (w *lineWaiter) lines() int { return strings.Count(w.String(), "\n") }

// alive reports whether pid runs (a zombie does not count). The test
// fleet's hosts share this machine's pid namespace, so their pids can be
// looked up here too.
func alive(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	k := bytes.LastIndexByte(stat, ')')
	return k > 0 && k+2 < len(stat) && stat[k+2] != 'Z'
}

// childThen starts the background child the interrupt cases look for. The
// child announces itself from a program of its own (exec reset its caught
// signals), not through the parent's echo of $!: between fork and exec a
// bash child still has its parent's TERM trap, so a SIGTERM landing there
// is taken by the trap and dropped when the child resets its traps, and
// sleep then outlives the interrupt holding the channel's stdout open
// (TERM_handled, under CI load).
const childThen = `sh -c 'echo "child $$ of $PPID"; exec sleep 300' & `

// procStates says, for a failure message, what each pid is doing: its
// state letter (T: stopped), process group and what it waits in.
func procStates(pids []string) string {
	var b strings.Builder
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		k := bytes.LastIndexByte(stat, ')')
		if err != nil || k < 0 {
			fmt.Fprintf(&b, "%s gone; ", pid)
			continue
		}
		f := strings.Fields(string(stat[k+1:]))
		wchan, _ := os.ReadFile("/proc/" + pid + "/wchan")
		fmt.Fprintf(&b, "%s %s state %s pgid %s wchan %s; ", pid, stat[:k+1], f[0], f[2], wchan)
	}
	return b.String()
}

// testExecInterrupt cancels an Exec whose commands each started a
// background child, and checks that every host's command and child are
// stopped, by the signal the case expects, before Exec returns.
func testExecInterrupt(t *testing.T, hosts []config.Host, dial cluster.DialOptions) {
	for _, tc := range []struct {
		name   string
		script string
		grace  time.Duration
		hard   bool
		want   string
	}{
		{"TERM", childThen + `sleep 301`, time.Minute, false, "TERM"},
		// A command that cleans up on SIGTERM gets to, and what it says
		// doing so reaches the output.
		{"TERM handled", `trap 'echo cleaned up; exit 3' TERM; ` + childThen + `wait`, time.Minute, false, ""},
		{"KILL after grace", `trap '' TERM; ` + childThen + `sleep 301`, 300 * time.Millisecond, false, "KILL"},
		{"KILL when hard", `trap '' TERM; ` + childThen + `sleep 301`, time.Hour, true, "KILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hard := make(chan struct{})
			var stdout lineWaiter
			res := make(chan []ExecResult, 1)
			start := time.Now()
			go func() {
				res <- Exec(ctx, hosts, ExecOptions{Args: []string{tc.script}, Dial: dial, Stdout: &stdout, Grace: tc.grace, Hard: hard})
			}()
			testenv.Wait(t, 60*time.Second, "every host's child line", func() (bool, string) {
				return stdout.lines() == len(hosts), stdout.String()
			})
			var children, parents []string
			started := stdout.String()
			for _, line := range strings.Split(strings.TrimSpace(started), "\n") {
				_, pids, ok := strings.Cut(line, " child ")
				pid, parent, ok2 := strings.Cut(pids, " of ")
				require.True(t, ok && ok2, "line %q", line)
				require.True(t, alive(pid), "child %s", pid)
				children, parents = append(children, pid), append(parents, parent)
			}
			cancel()
			if tc.hard {
				time.Sleep(200 * time.Millisecond)
				close(hard)
			}
			var results []ExecResult
			select {
			case results = <-res:
			case <-time.After(30 * time.Second):
				t.Fatalf("Exec did not return within 30s of the interrupt; output:\n%s\ncommands: %s\nchildren: %s",
					stdout.String(), procStates(parents), procStates(children))
			}
			if tc.hard {
				assert.Less(t, time.Since(start), 30*time.Second, "Hard did not cut the grace short")
			}
			for _, r := range results {
				var ee *cluster.ExitError
				if assert.ErrorAs(t, r.Err, &ee, r.Host) {
					assert.Equal(t, tc.want, ee.Signal, r.Host)
					if tc.want == "" {
						assert.Equal(t, 3, ee.Code, r.Host)
						assert.Contains(t, stdout.String(), "["+r.Host+"] cleaned up\n")
					}
				}
			}
			// The background children are gone too: the whole group got
			// the signal. They are reparented and reaped asynchronously.
			for _, pid := range children {
				testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("child %s to be gone after the interrupt", pid), func() bool { return !alive(pid) })
			}
		})
	}
}

func TestExecInterruptLocal(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	testExecInterrupt(t, []config.Host{execLocalHost("a"), execLocalHost("b")}, cluster.DialOptions{})
}

// testExecTimeout: the last host's command outlasts the timeout and is
// stopped, with what it started; the others finish and report as usual.
func testExecTimeout(t *testing.T, hosts []config.Host, dial cluster.DialOptions) {
	last := hosts[len(hosts)-1].Name
	for _, tc := range []struct {
		name, trap, how string
	}{
		{"TERM", "", "stopped with SIGTERM"},
		{"TERM ignored", "trap '' TERM; ", "stopped with SIGKILL"},
		{"TERM handled", "trap 'echo cleaned up; exit 3' TERM; ", "it exited 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout lineWaiter
			// $H, set per host (one Exec each), picks the slow host:
			// local hosts share one machine and hostname.
			line := fmt.Sprintf(`echo "started"; [ "$H" = %s ] || exit 0; %s%swait`, last, tc.trap, childThen)
			results := make([]ExecResult, len(hosts))
			var wg sync.WaitGroup
			for i, h := range hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = Exec(context.Background(), []config.Host{h}, ExecOptions{
						Args: []string{line}, Env: map[string]string{"H": h.Name}, Dial: dial,
						Stdout: &stdout, Timeout: time.Second, Grace: 300 * time.Millisecond,
					})[0]
				}()
			}
			wg.Wait()
			var child string
			for _, l := range strings.Split(stdout.String(), "\n") {
				if _, pids, ok := strings.Cut(l, "] child "); ok {
					child, _, _ = strings.Cut(pids, " of ")
				}
			}
			require.NotEmpty(t, child, "output:\n%s", stdout.String())
			for _, r := range results {
				if r.Host != last {
					assert.Equal(t, 0, r.Code, "%s: %v", r.Host, r.Err)
					continue
				}
				assert.Equal(t, ExitTimedOut, r.Code)
				assert.ErrorIs(t, r.Err, ErrExecTimeout)
				assert.EqualError(t, r.Err, "timed out after 1s; "+tc.how)
			}
			assert.Equal(t, ExitTimedOut, WorstExitCode(results))
			testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("child %s to be gone after the timeout", child), func() bool { return !alive(child) })
		})
	}
}

func TestExecTimeoutLocal(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	testExecTimeout(t, []config.Host{execLocalHost("a"), execLocalHost("b")}, cluster.DialOptions{})
}
