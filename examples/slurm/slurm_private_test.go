package slurm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// newShellJob is a job of one process per node that runs command (no
// torch) from a code directory holding data.txt and run.sh.
func newShellJob(t *testing.T, workdir, command string, maxRestarts int) *job {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	code := filepath.Join(dir, "code")
	require.NoError(t, os.Mkdir(code, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(code, "data.txt"), []byte("pushed-"+filepath.Base(dir)+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(code, "run.sh"), []byte(command+"\n"), 0o755))
	j := &job{dir: dir, workdir: workdir, name: "sh"}
	body := fmt.Sprintf(`[job]
name = %q
framework = "pytorch"
command = ["sh", "run.sh"]
code = %q
workdir = %q
max_restarts = %d
procs_per_host = 1
restart_backoff = "1s"
stop_grace = "3s"

[slurm]
nodes = %d
time = "10:00"
requeue = true
`, j.name, code, workdir, maxRestarts, nodes)
	require.NoError(t, os.WriteFile(j.path(), []byte(body), 0o644))
	return j
}

func (j *job) events(t *testing.T, runDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "events.log"))
	require.NoError(t, err, "batch output:\n%s", j.batchOutput())
	return string(b)
}

// TestSubmitPrivateWorkdir: a workdir that each node has for itself
// (/home/drovertest is private to each node's namespace) is not refused:
// the batch host sees its own, the other nodes get the code pushed through
// Slurm steps, the events say so, and every process runs the pushed code.
func TestSubmitPrivateWorkdir(t *testing.T) {
	need(t)
	workdir := filepath.Join("/home", fleettest.User, fmt.Sprintf("wd-%d-%d", os.Getpid(), time.Now().UnixNano()))
	j := newShellJob(t, workdir, `echo "data=$(cat data.txt) index=$DROVER_INDEX"`, 0)
	want := "data=pushed-" + filepath.Base(j.dir)
	j.submit(t)
	j.wait(t)
	require.Equal(t, []string{"attempt-1"}, j.attempts(t), "batch output:\n%s", j.batchOutput())
	for i := range nodes {
		assert.Contains(t, j.log(t, "attempt-1", fmt.Sprintf("worker-%d", i)), want, "worker-%d ran the pushed code", i)
	}
	events := j.events(t, j.runDir(t))
	for i, n := range sl.Nodes {
		msg := fmt.Sprintf("workdir %s is not shared with node %s: pushing", workdir, n)
		if i == 0 {
			// The batch host, where drover runs, sees its own.
			assert.NotContains(t, events, msg)
			continue
		}
		assert.Contains(t, events, msg)
	}
	_, err := os.Stat(workdir)
	assert.True(t, os.IsNotExist(err), "the workdir is the nodes' own, not this machine's")
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
}

var restartRE = regexp.MustCompile(`(?m)^restart=([0-9]+)$`)

// TestRequeueRestartCount: a job that failed for good after restarts 0, 1
// and 2 and is requeued continues with 3, 4, 5, not from
// SLURM_RESTART_COUNT=1 again. Rank 0 fails each attempt (and has printed
// first); the others wait to be stopped with the group.
func TestRequeueRestartCount(t *testing.T) {
	need(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	j := newShellJob(t, filepath.Join(dir, "work"), `echo "restart=$DROVER_RESTART_COUNT"; if [ "$RANK" = 0 ]; then exit 3; fi; exec sleep 300`, 2)
	j.submit(t)
	j.wait(t)
	j.requeue(t)
	// The second allocation fails in a few seconds, maybe between two
	// looks at squeue: wait for its run directory, then for the job to
	// end.
	var runs []string
	var err error
	testenv.Wait(t, jobTimeout, "the second allocation's run directory", func() (bool, string) {
		runs, err = filepath.Glob(filepath.Join(j.dir, "runs", j.name+"-*"))
		return err != nil || len(runs) >= 2, fmt.Sprintf("%v", runs)
	})
	require.NoError(t, err)
	j.wait(t)
	runs, err = filepath.Glob(filepath.Join(j.dir, "runs", j.name+"-*"))
	require.NoError(t, err)
	require.Len(t, runs, 2, "one drover run per allocation; batch output:\n%s", j.batchOutput())
	slices.Sort(runs)
	var counts []string
	for _, run := range runs {
		for a := 1; a <= 3; a++ {
			b, err := os.ReadFile(filepath.Join(run, fmt.Sprintf("attempt-%d", a), "worker-0.log"))
			require.NoError(t, err, "batch output:\n%s", j.batchOutput())
			m := restartRE.FindStringSubmatch(string(b))
			require.NotNil(t, m, "no restart= line in %s attempt %d:\n%s", run, a, b)
			counts = append(counts, m[1])
		}
	}
	assert.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, counts, "DROVER_RESTART_COUNT over both allocations")
	assert.Contains(t, j.events(t, runs[1]), "its last run used DROVER_RESTART_COUNT=2; continuing from 3")
}

// TestPushInAllocation: `drover push` in an allocation goes by the rule of
// `drover run`: nodes that share the workdir get one push between them,
// not three racing into the same directory; nodes with a workdir of their
// own get a push each.
func TestPushInAllocation(t *testing.T) {
	need(t)
	push := func(j *job) string {
		out := filepath.Join(j.dir, "push.out")
		_, err := sl.Output(context.Background(), "sbatch", "--wait", "--nodes="+strconv.Itoa(nodes), "--output="+out,
			"--wrap="+droverBin+" push --inventory slurm "+j.path())
		b, _ := os.ReadFile(out)
		require.NoError(t, err, "drover push:\n%s", b)
		return string(b)
	}
	shared := newShellJob(t, filepath.Join(t.TempDir(), "work"), "true", 0)
	out := push(shared)
	assert.Len(t, regexp.MustCompile(`(?m)^\S+: 2 sent `).FindAllString(out, -1), 1, "one push for the shared workdir:\n%s", out)
	assert.Len(t, regexp.MustCompile(`(?m)^\S+: not pushed: the workdir \S+ is \S+'s, on the shared filesystem$`).FindAllString(out, -1), nodes-1, out)
	_, err := os.Stat(filepath.Join(shared.workdir, "run.sh"))
	assert.NoError(t, err, "the code is in the shared workdir")

	private := newShellJob(t, filepath.Join("/home", fleettest.User, fmt.Sprintf("wd-%d-%d", os.Getpid(), time.Now().UnixNano())), "true", 0)
	out = push(private)
	assert.Len(t, regexp.MustCompile(`(?m)^\S+: 2 sent `).FindAllString(out, -1), nodes, "a push per node-local workdir:\n%s", out)
}
