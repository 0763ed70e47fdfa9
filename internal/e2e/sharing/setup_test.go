package sharing

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// Issue 38, item 1: a job's setup builds the processes' environment once
// per host and only when what it depends on changed. One scenario on 3
// hosts, run after run: the first run sets up each host once and every
// rank runs from the venv; a second run with nothing changed, and a
// restart after a SIGKILLed rank, set up nothing; a changed setup_key
// file sets up each host once more; a setup that exits 3 on one host
// starts no process anywhere and says which host, 3 and its output.
func TestRunSetupOncePerHostUntilItsKeyChanges(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Command: `[".venv/bin/python", "w.py"]`, Job: `max_restarts = 2
setup = ["echo making venv", "python3 -m venv --system-site-packages --without-pip .venv", "[ -z \"$SETUP_FAIL\" ] || { echo broken on purpose; exit 3; }"]
setup_key = ["lock.txt"]`})
	code := filepath.Join(j.Dir, "code")
	write := func(name, body string) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(code, name), []byte(body), 0o644))
	}
	write("lock.txt", "numpy==1\n")
	// Rank 1 SIGKILLs itself in the first attempt of a run whose code
	// holds kill-once.
	write("w.py", `import os, signal, sys
print("prefix=" + sys.prefix, flush=True)
if os.path.exists("kill-once") and os.environ["RANK"] == "1" and os.environ["DROVER_RESTART_COUNT"] == "0":
    os.kill(os.getpid(), signal.SIGKILL)
`)
	hosts := []string{fleet.Hosts[0].Name, fleet.Hosts[1].Name, fleet.Hosts[2].Name}
	setupRE := regexp.MustCompile(`(?m)^\[setup@(\S+)\] making venv$`)
	setups := func(d *kit.DroverProc) map[string]int {
		n := map[string]int{}
		for _, m := range setupRE.FindAllStringSubmatch(d.Stdout.String(), -1) {
			n[m[1]]++
		}
		return n
	}
	once := map[string]int{hosts[0]: 1, hosts[1]: 1, hosts[2]: 1}
	run := func(want int) *kit.DroverProc {
		t.Helper()
		d := kit.StartDrover(t, j)
		require.Equal(t, want, d.Wait(t, 90*time.Second), "stderr:\n%s", d.Stderr.String())
		return d
	}

	first := run(0)
	assert.Equal(t, once, setups(first), "the first run sets up each host once")
	venvRE := regexp.MustCompile(`(?m)^\[worker-\d@\S+\] prefix=` + regexp.QuoteMeta(kit.HostHome+"/"+j.Workdir+"/.venv") + `$`)
	assert.Len(t, venvRE.FindAllString(first.Stdout.String(), -1), 3, "every rank runs from the venv")
	logs, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*", "setup-*.log"))
	require.NoError(t, err)
	assert.Len(t, logs, 3, "each host's setup output kept in the run directory")

	// A local .venv in the code directory (uv makes one there) is not
	// pushed over the hosts' own.
	require.NoError(t, os.MkdirAll(filepath.Join(code, ".venv", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(code, ".venv", "bin", "python"), []byte("#!/bin/sh\necho local venv\n"), 0o755))
	second := run(0)
	assert.Empty(t, setups(second), "nothing changed: no setup")
	assert.NotContains(t, second.Stdout.String(), "[setup@")
	assert.Len(t, venvRE.FindAllString(second.Stdout.String(), -1), 3, "the hosts' venv, not the local one")

	write("kill-once", "")
	restarted := run(0)
	assert.Contains(t, restarted.Stderr.String(), "exited 137 (SIGKILL)")
	assert.Contains(t, restarted.Stderr.String(), "attempt 2/")
	assert.Empty(t, setups(restarted), "neither the code change nor the restart sets up")
	require.NoError(t, os.Remove(filepath.Join(code, "kill-once")))

	write("lock.txt", "numpy==2\n")
	changed := run(0)
	assert.Equal(t, once, setups(changed), "a changed setup_key file sets up each host once more")

	// drover setup alone: current on h0, so skipped; --force runs it.
	setupCmd := func(args ...string) *kit.DroverProc {
		t.Helper()
		d := kit.StartDroverArgs(t, j, append([]string{"setup", j.Path, "--hosts", hosts[0]}, args...)...)
		require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
		return d
	}
	skipped := setupCmd()
	assert.Contains(t, skipped.Stderr.String(), "setup on "+hosts[0]+": unchanged since its last setup, skipped")
	assert.Empty(t, setups(skipped))
	assert.Equal(t, map[string]int{hosts[0]: 1}, setups(setupCmd("--force")))

	// h2 fails its setup with 3 (its [host.env], the inventory's last host).
	f, err := os.OpenFile(j.Inventory, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("[host.env]\nSETUP_FAIL = \"1\"\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	write("lock.txt", "numpy==3\n")
	failed := run(kit.ExitFailed)
	stderr := failed.Stderr.String()
	assert.NotRegexp(t, `(?m)^\[worker-`, failed.Stdout.String(), "no process started anywhere")
	assert.Contains(t, stderr, "setup on "+hosts[2]+" exited 3; its last lines:")
	assert.Contains(t, stderr, "broken on purpose")
	assert.NotContains(t, stderr, "restarting the whole group", "a failed setup is not retried")
	assert.Equal(t, 1, strings.Count(failed.Stdout.String(), "["+"setup@"+hosts[2]+"] broken on purpose"))
}
