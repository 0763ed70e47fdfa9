package examples_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// directCopyScript is the job of TestFleetDirectCopySlowController: rank
// 0 saves one 200 MiB checkpoint (temp name, rename) once the test says
// go, and every rank then waits.
// save200MiB is rank 0's save in both scripts: 200 MiB of noise under a
// temporary name, renamed into place as training frameworks do.
const save200MiB = `  head -c 209715200 /dev/urandom > "$DROVER_CHECKPOINT_DIR/.step-1.pt.tmp"
  mv "$DROVER_CHECKPOINT_DIR/.step-1.pt.tmp" "$DROVER_CHECKPOINT_DIR/step-1.pt"
`

const directCopyScript = `set -e
mkdir -p "$DROVER_CHECKPOINT_DIR"
if [ "$RANK" = 0 ]; then
  touch ready
  while [ ! -e go ]; do sleep 0.2; done
` + save200MiB + `fi
exec sleep 600
`

// TestFleetDirectCopySlowController (issue 27): drover runs in a network
// namespace 50 Mbit/s from 3 hosts on the fast bridge (tbf on both ends
// of its link), with checkpoint_copies = 3. Rank 0 saves one 200 MiB
// checkpoint: both other hosts get a verified copy, host to host, and the
// controller's link carries a few MiB meanwhile where the relay needs
// 600 MiB (read once, written twice).
func TestFleetDirectCopySlowController(t *testing.T) {
	link := slowController(t)
	dir := t.TempDir()
	j := &fleetJob{dir: dir, framework: "pytorch", name: "e2e-direct",
		workdir: fmt.Sprintf("e2e/direct-%d", time.Now().UnixNano())}
	j.writeInventory(t, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code", "w.sh"), []byte(directCopyScript), 0o644))
	require.NoError(t, os.WriteFile(j.jobPath(), []byte(fmt.Sprintf(`inventory = "inventory.toml"

[job]
name = %q
framework = "pytorch"
command = ["sh", "w.sh"]
code = "code"
workdir = %q
checkpoint_dir = "checkpoints"
checkpoint_copies = 3
max_restarts = 0
stop_grace = "2s"
`, j.name, j.workdir)), 0o644))
	r := startDroverIn(t, link.NS, dir, "run", "--quiet", "--log-dir", filepath.Join(dir, "runs"), j.jobPath())

	work := "/home/" + fleet.User + "/" + j.workdir
	testenv.Wait(t, checkpointTimeout, "rank 0 to run", func() (bool, string) {
		if _, err := fleet.Exec(0, "test", "-e", path.Join(work, "ready")); err == nil {
			return true, ""
		}
		require.False(t, r.finished(), "drover exited before rank 0 ran; output:\n%s", r.output())
		return false, "output:\n" + r.output()
	})
	before, err := link.Bytes()
	require.NoError(t, err)
	require.Positive(t, before, "drover's SSH sessions (dials, push) crossed the link: it is counted")
	out, err := fleet.Exec(0, "sh", "-c", fmt.Sprintf("touch %[1]s/go && chown %[2]s %[1]s/go", work, fleet.User))
	require.NoError(t, err, "%s", out)

	h := []string{fleet.Hosts[0].Name, fleet.Hosts[1].Name, fleet.Hosts[2].Name}
	waitEvent(t, r, regexp.MustCompile(`checkpoint step-1\.pt \(#1, 200\.0 MiB\) copied from `+h[0]+` to \[`+h[1]+` `+h[2]+`\] in \S+ \(host to host: `+h[1]+`, `+h[2]+`\)`))
	after, err := link.Bytes()
	require.NoError(t, err)
	t.Logf("the controller's link carried %.1f MiB before rank 0 saved (%d bytes), %.1f KiB while 200 MiB went to two hosts",
		float64(before)/(1<<20), before, float64(after-before)/(1<<10))
	assert.Less(t, after-before, int64(20<<20), "the copies went host to host, not through the controller")

	sum := func(i int, p string) string {
		out, err := fleet.Exec(i, "sha256sum", p)
		require.NoError(t, err, "%s", out)
		return strings.Fields(string(out))[0]
	}
	want := sum(0, path.Join(work, "checkpoints", "step-1.pt"))
	for i := 1; i < 3; i++ {
		assert.Equal(t, want, sum(i, path.Join(work, ".drover", "checkpoints", "000001", "step-1.pt")), "%s's copy", h[i])
	}
	assert.NotContains(t, r.events(t), "through the controller")
}

// lostHostScript: rank 0 saves one 200 MiB checkpoint and every rank
// waits; a process that resumes prints the sha256 of what it resumes
// from and ends.
const lostHostScript = `set -e
mkdir -p "$DROVER_CHECKPOINT_DIR"
if [ -n "$DROVER_RESUME_FROM" ]; then
  echo "rank $RANK resumed $(sha256sum "$DROVER_RESUME_FROM" | cut -d' ' -f1) from $DROVER_RESUME_FROM"
  exit 0
fi
if [ "$RANK" = 0 ]; then
` + save200MiB + `fi
exec sleep 600
`

// TestFleetLostHostSlowController (issue 27): drover 50 Mbit/s away, 3
// hosts and a spare. Rank 0 saves a 200 MiB checkpoint, drover copies it
// to h1 host to host, and h0 is cut off for good. Every process runs
// again on the new group (the spare in h0's place) and resumes from that
// checkpoint, staged onto h2 and the spare from h1's copy host to host:
// the controller's link carries the spare's agent install, not the
// checkpoint (the relay would need 600 MiB).
func TestFleetLostHostSlowController(t *testing.T) {
	link := slowController(t)
	dir := t.TempDir()
	j := &fleetJob{dir: dir, framework: "pytorch", name: "e2e-direct-lost", workdir: fmt.Sprintf("e2e/direct-lost-%d", time.Now().UnixNano())}
	hosts := fleet.ClusterHosts()
	require.GreaterOrEqual(t, len(hosts), fleetHosts+1)
	var inv strings.Builder
	fmt.Fprintf(&inv, "[ssh]\nuser = %q\nidentity_file = %q\nknown_hosts = %q\n", fleet.User, fleet.KeyFile, fleet.KnownHosts)
	for i, h := range hosts[:fleetHosts+1] {
		fmt.Fprintf(&inv, "\n[[host]]\nname = %q\naddress = %q\ngpus = []\nspare = %t\n", h.Name, h.Address, i == fleetHosts)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inventory.toml"), []byte(inv.String()), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "code"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code", "w.sh"), []byte(lostHostScript), 0o644))
	require.NoError(t, os.WriteFile(j.jobPath(), []byte(fmt.Sprintf(`inventory = "inventory.toml"

[job]
name = %q
framework = "pytorch"
command = ["sh", "w.sh"]
code = "code"
workdir = %q
checkpoint_dir = "checkpoints"
max_restarts = 2
host_wait = "2s"
stop_grace = "2s"
restart_backoff = "1s"
`, j.name, j.workdir)), 0o644))
	r := startDroverIn(t, link.NS, dir, "run", "--quiet", "--log-dir", filepath.Join(dir, "runs"), j.jobPath())

	h := []string{fleet.Hosts[0].Name, fleet.Hosts[1].Name, fleet.Hosts[2].Name, fleet.Hosts[3].Name}
	waitEvent(t, r, regexp.MustCompile(`checkpoint step-1\.pt \(#1, 200\.0 MiB\) copied from `+h[0]+` to \[`+h[1]+`\] in \S+ \(host to host: `+h[1]+`\)`))
	work := "/home/" + fleet.User + "/" + j.workdir
	out, err := fleet.Exec(1, "sha256sum", path.Join(work, ".drover", "checkpoints", "000001", "step-1.pt"))
	require.NoError(t, err, "%s", out)
	want := strings.Fields(string(out))[0]
	before, err := link.Bytes()
	require.NoError(t, err)
	require.NoError(t, fleet.Cut(0))
	t.Cleanup(func() {
		if err := fleet.Heal(0); err != nil {
			t.Errorf("heal %s: %v", h[0], err)
		}
	})

	code := r.wait(t)
	events := r.events(t)
	require.Equal(t, 0, code, "drover exit status; output:\n%s", r.output())
	after, err := link.Bytes()
	require.NoError(t, err)
	t.Logf("the controller's link carried %.1f MiB from the cut to the end", float64(after-before)/(1<<20))
	assert.Contains(t, events, "replaced by spare "+h[3])
	assert.Regexp(t, `staged 200\.0 MiB from `+h[1]+`:\S+ onto \S+, \S+ in \S+ \(host to host: \S+, \S+\)`, events)
	assert.Less(t, after-before, int64(100<<20), "staging went host to host: the link carried the spare's agent, not 200 MiB twice")
	run := runDir(t, filepath.Join(dir, "runs"))
	as := attempts(t, run)
	for rank := range fleetHosts {
		log := readLog(t, filepath.Join(run, as[len(as)-1], fmt.Sprintf("worker-%d.log", rank)))
		assert.Regexp(t, fmt.Sprintf(`rank %d resumed %s from /\S+/step-1\.pt`, rank, want), log, "rank %d resumed from the checkpoint, on its own host", rank)
	}
	if testing.Verbose() {
		t.Logf("drover's events:\n%s", events)
	}
}

// slowController puts drover 50 Mbit/s away from the fleet's hosts for
// the test (see fleettest.SlowLink) and takes the link away after it.
func slowController(t *testing.T) *fleettest.SlowLink {
	t.Helper()
	needFleet(t)
	link, err := fleet.SlowLink("50mbit")
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := link.Close(); err != nil {
			t.Errorf("remove the slow link: %v", err)
		}
	})
	return link
}
