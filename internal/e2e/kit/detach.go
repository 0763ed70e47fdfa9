package kit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/runview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// NumberedScript prints a numbered line every 0.2 s, forever.
const NumberedScript = `
i=0
while true; do
  echo "n=$i rank=$RANK restart=$DROVER_RESTART_COUNT pid=$$"
  i=$((i+1))
  sleep 0.2
done
`

// CheckpointingScript is NumberedScript that resumes its count from
// DROVER_RESUME_FROM and, on rank 0, checkpoints the count every 20 lines.
const CheckpointingScript = `
i=0
if [ -n "$DROVER_RESUME_FROM" ]; then i=$(cat "$DROVER_RESUME_FROM"); fi
mkdir -p "$DROVER_CHECKPOINT_DIR"
while true; do
  echo "n=$i rank=$RANK restart=$DROVER_RESTART_COUNT pid=$$"
  i=$((i+1))
  if [ "$RANK" = 0 ] && [ $((i % 20)) = 0 ]; then
    echo $i > "$DROVER_CHECKPOINT_DIR/.tmp" && mv "$DROVER_CHECKPOINT_DIR/.tmp" "$DROVER_CHECKPOINT_DIR/step-$(printf %06d $i)"
  fi
  sleep 0.2
done
`

// DroverIn runs one drover command to its end in dir, with the job's own
// HOME as StartDrover gives it, and returns its output and status.
func DroverIn(t *testing.T, j *FleetJob, dir string, within time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(DroverBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = j.droverEnv()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("drover %v: %v", args, err)
		}
		AssertNoRace(t, errb.String())
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("drover %v still running after %s\nstdout:\n%s\nstderr:\n%s", args, within, out.String(), errb.String())
		return "", "", -1
	}
}

// Status is `drover status JOB --json` from a directory of its own.
func Status(t *testing.T, j *FleetJob) runview.RunStatus {
	t.Helper()
	out, errs, code := DroverIn(t, j, t.TempDir(), 30*time.Second, "status", j.Path, "--json")
	if code != 0 {
		out, err := fleet.Exec(0, "sh", "-c", "ls -la "+HostHome+"/"+j.Workdir+"/.drover/runs/*/; cat "+HostHome+"/"+j.Workdir+"/.drover/runs/*/run.json")
		t.Logf("host 0: %s %v", out, err)
	}
	require.Equal(t, 0, code, "drover status: %s", errs)
	var st runview.RunStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// WaitStatus polls status until ok holds, failing after within.
func WaitStatus(t *testing.T, j *FleetJob, within time.Duration, what string, ok func(st runview.RunStatus) bool) runview.RunStatus {
	t.Helper()
	var st runview.RunStatus
	testenv.Wait(t, within, "status to show "+what, func() (bool, string) {
		st = Status(t, j)
		return ok(st), fmt.Sprintf("%+v", st)
	})
	return st
}

// Running counts st's processes in state running.
func Running(st runview.RunStatus) int {
	n := 0
	for _, p := range st.Processes {
		if p.State == agent.ProcRunning {
			n++
		}
	}
	return n
}

// StartDetachedRun starts `drover run -d` in a session of its own (setsid),
// checks that it returns 0 with the run id, kills that whole session, and
// returns the background supervisor's pid (killed at cleanup).
func StartDetachedRun(t *testing.T, j *FleetJob) int {
	t.Helper()
	d := StartDroverWrapped(t, j, []string{Setsid(t)}, "run", "-d", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Regexp(t, `run \S+ started in the background`, d.Stdout.String())
	m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String())
	require.NotNil(t, m, d.Stdout.String())
	sup, _ := strconv.Atoi(m[1])
	testenv.SignalAtCleanup(t, sup, syscall.SIGKILL, false)
	// The session that started it is gone entirely.
	_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
	sid, err := unix.Getsid(sup)
	require.NoError(t, err, "the background supervisor died with the session that started it")
	assert.NotEqual(t, d.Cmd.Process.Pid, sid, "the supervisor has a session of its own")
	return sup
}

func Setsid(t *testing.T) string {
	t.Helper()
	return testenv.LookPath(t, "setsid")
}

// WaitFile polls a local file until it matches re.
func WaitFile(t *testing.T, file string, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	var b []byte
	testenv.Wait(t, within, file+" to match "+re.String(), func() (bool, string) {
		b, _ = os.ReadFile(file)
		return re.Match(b), "\n" + string(b)
	})
	return string(b)
}

// AssertPs checks that drover ps lists run id as this machine's, and
// drover ps --inventory as live on the job's three hosts.
func AssertPs(t *testing.T, j *FleetJob, id string) {
	t.Helper()
	for _, args := range [][]string{{"ps", "--json"}, {"ps", "--json", "--inventory", j.Inventory}} {
		out, errs, code := DroverIn(t, j, t.TempDir(), 30*time.Second, args...)
		require.Equal(t, 0, code, "%v: %s", args, errs)
		var rows []hostio.PsRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		var found *hostio.PsRow
		for i := range rows {
			if rows[i].RunID == id {
				found = &rows[i]
			}
		}
		require.NotNil(t, found, "%v: %s", args, out)
		assert.Equal(t, agent.RunRunning, found.State, "%v", args)
		assert.Equal(t, 1, found.Attempt, "%v", args)
		assert.Len(t, found.Hosts, 3, "%v", args)
	}
}
