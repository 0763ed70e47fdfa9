package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// TestRunFullLogDisk is issue 21 item 5: with --log-dir on a full file
// system (a 64 KiB tmpfs, filled, mounted in a mount namespace of drover's
// own so that nothing outside the test sees it), drover says so once,
// every line still reaches the terminal and the hosts' own logs, the
// processes are never held up, and Ctrl-C stops the job within its grace.
func TestRunFullLogDisk(t *testing.T) {
	fleettest.Need(t, fleet)
	testenv.LookPath(t, "unshare") // util-linux
	const n = 3000                 // 3000 lines of about 100 bytes: far more than the disk holds
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: fmt.Sprintf(`
i=0
while [ $i -lt %d ]; do
	echo "line $RANK $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	i=$((i+1))
done
echo "printed everything rank=$RANK"
sleep 1000
`, n)})
	require.NoError(t, os.MkdirAll(j.LogRoot, 0o755))
	mount := `mount -t tmpfs -o size=64k drover-test-full "$0" && { cat /dev/zero > "$0/fill" 2>/dev/null; true; } && exec "$@"`
	d := kit.StartDroverWrapped(t, j, []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", mount, j.LogRoot},
		"run", j.Path, "--log-dir", j.LogRoot)

	d.WaitLines(t, regexp.MustCompile(`(?m)^\[worker-\d@\S+\] printed everything rank=\d$`), 2, 60*time.Second)
	for i := range 2 {
		prefix := fmt.Sprintf("[worker-%d@%s] line %d ", i, fleet.Hosts[i].Name, i)
		assert.Equal(t, n, strings.Count(d.Stdout.String(), prefix), "every line of worker-%d reached the terminal", i)
		log, err := kit.HostFile(t, i, path.Join(j.Workdir, ".drover/logs/attempt-1", fmt.Sprintf("worker-%d.log", i)))
		require.NoError(t, err)
		assert.Equal(t, n, strings.Count(log, fmt.Sprintf("line %d ", i)), "the host's own log of worker-%d is whole", i)
	}
	stderr := d.Stderr.String()
	assert.Equal(t, 1, strings.Count(stderr, "WARNING: cannot write the local logs"), "said once:\n%s", stderr)
	assert.Regexp(t, `WARNING: cannot write the local logs \(write `+regexp.QuoteMeta(j.LogRoot)+`/\S+/attempt-1/worker-\d\.log: no space left on device\)\. The log files under `+regexp.QuoteMeta(j.LogRoot)+`/[^/\s]+ are incomplete from here on; output still streams to this terminal, and every host keeps the whole log in <workdir>/\.drover/logs/attempt-<n>/`, stderr)

	d.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 2*time.Second+10*time.Second))
	assert.NotContains(t, d.Stderr.String(), "killing", "the processes stopped within the grace period")
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
	entries, err := os.ReadDir(j.LogRoot)
	require.NoError(t, err)
	assert.Empty(t, entries, "the full disk was drover's own: nothing of it is left outside")
}

// TestRunFullLogDiskAtRestart: the log disk (a small ext4 on a loop
// device, in drover's own mount namespace) fills up, inodes and blocks,
// during the first attempt; the restart can create neither its attempt
// directory nor its log files, and goes on without local logs instead of
// ending the job as "could not be set up".
func TestRunFullLogDiskAtRestart(t *testing.T) {
	fleettest.Need(t, fleet)
	testenv.LookPath(t, "unshare")   // util-linux
	testenv.LookPath(t, "mkfs.ext4") // e2fsprogs
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: `
echo "start rank=$RANK restart=$DROVER_RESTART_COUNT"
if [ "$DROVER_RESTART_COUNT" = 0 ]; then
	sleep 3
	if [ "$RANK" = 1 ]; then exit 3; fi
	sleep 1000
fi
echo "done rank=$RANK"
`, Job: "max_restarts = 1"})
	require.NoError(t, os.MkdirAll(j.LogRoot, 0o755))
	img := filepath.Join(t.TempDir(), "logs.img")
	out, err := exec.Command("sh", "-c", `truncate -s 4M "$0" && mkfs.ext4 -q -F -N 64 "$0"`, img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// Once attempt-1 exists, fill every inode and then every block.
	mount := `mount -o loop "$1" "$0" || exit 1
(
	n=0
	until ls -d "$0"/*/attempt-1 >/dev/null 2>&1; do
		n=$((n+1)); [ $n -lt 1200 ] || exit 1
		sleep 0.05
	done
	i=0; while : > "$0/inode-$i" 2>/dev/null; do i=$((i+1)); done
	cat /dev/zero > "$0/fill" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
shift
exec "$@"`
	d := kit.StartDroverWrapped(t, j, []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", mount, j.LogRoot, img},
		"run", j.Path, "--log-dir", j.LogRoot)
	require.Equal(t, 0, d.Wait(t, 90*time.Second), d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "attempt 2/2: job "+j.Name+" succeeded")
	assert.NotContains(t, stderr, "could not be set up")
	assert.Equal(t, 1, strings.Count(stderr, "WARNING: cannot write the local logs"), stderr)
	assert.Regexp(t, `WARNING: cannot write the local logs \((mkdir|open|write) `+regexp.QuoteMeta(j.LogRoot)+`/[^/\s]+/attempt-\d\S*: no space left on device\)\. The log files under `+regexp.QuoteMeta(j.LogRoot)+`/[^/\s]+ are incomplete`, stderr)
	for i := range 2 {
		assert.Contains(t, d.Stdout.String(), fmt.Sprintf("[worker-%d@%s] done rank=%d\n", i, fleet.Hosts[i].Name, i))
	}
}
