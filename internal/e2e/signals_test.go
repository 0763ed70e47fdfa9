package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/testenv"
)

// blockAndExec runs its arguments with SIGUSR1 blocked, as a parent that
// blocks signals leaves them to what it executes; python itself leaves
// SIGPIPE and SIGXFSZ ignored.
const blockAndExec = `import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.execvp(sys.argv[1], sys.argv[1:])`

// Under nohup, started by a parent that blocks a signal, drover itself
// keeps SIGHUP ignored, but the ranks it starts on a local host get what
// sshd gives a remote process: every signal at its default and none
// blocked. Before, a local host's agent inherited nohup's ignored SIGHUP
// and the blocked signal, and the ranks the blocked signal: a rank that
// waits for SIGUSR1 (a checkpoint request, say) never got it.
func TestRunUnderNohupGivesRanksDefaultSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the drover binary")
	}
	python := testenv.LookPath(t, "python3")
	dir := t.TempDir()
	j := &kit.FleetJob{Name: "nohup-signals", Dir: dir, Path: filepath.Join(dir, "job.toml"), LogRoot: filepath.Join(dir, "runs")}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "home"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.WriteFile(j.Path, []byte(fmt.Sprintf(`[job]
name = %q
framework = "pytorch"
command = ["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"]
code = "code"
procs_per_host = 2
stop_grace = "2s"

[[host]]
name = "local-a"
address = "local"
workdir = %q
`, j.Name, filepath.Join(dir, "wd"))), 0o644))
	d := kit.StartDroverWrapped(t, j, []string{"nohup", python, "-c", blockAndExec}, "run", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 60*time.Second))
	out := d.Stdout.String()
	for i := range 2 {
		for _, field := range []string{"SigIgn", "SigBlk"} {
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^\[worker-%d@local-a\] %s:\s+0+$`, i, field)), out,
				"rank %d's %s is empty, as under sshd", i, field)
		}
	}
}
