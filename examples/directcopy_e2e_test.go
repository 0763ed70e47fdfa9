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
)

// directCopyScript is the job of TestFleetDirectCopySlowController: rank
// 0 saves one 200 MiB checkpoint (temp name, rename) once the test says
// go, and every rank then waits.
const directCopyScript = `set -e
mkdir -p "$DROVER_CHECKPOINT_DIR"
if [ "$RANK" = 0 ]; then
  touch ready
  while [ ! -e go ]; do sleep 0.2; done
  head -c 209715200 /dev/urandom > "$DROVER_CHECKPOINT_DIR/.step-1.pt.tmp"
  mv "$DROVER_CHECKPOINT_DIR/.step-1.pt.tmp" "$DROVER_CHECKPOINT_DIR/step-1.pt"
fi
exec sleep 600
`

// TestFleetDirectCopySlowController (issue 27): drover runs in a network
// namespace 50 Mbit/s from 3 hosts on the fast bridge (tbf on both ends
// of its link), with checkpoint_copies = 3. Rank 0 saves one 200 MiB
// checkpoint: both other hosts get a verified copy, host to host, and the
// controller's link carries a few MiB meanwhile where the relay needs
// 600 MiB (read once, written twice).
func TestFleetDirectCopySlowController(t *testing.T) {
	needFleet(t)
	link, err := fleet.SlowLink("50mbit")
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := link.Close(); err != nil {
			t.Errorf("remove the slow link: %v", err)
		}
	})
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
	deadline := time.Now().Add(checkpointTimeout)
	for {
		if _, err := fleet.Exec(0, "test", "-e", path.Join(work, "ready")); err == nil {
			break
		}
		require.False(t, r.finished(), "drover exited before rank 0 ran; output:\n%s", r.output())
		require.True(t, time.Now().Before(deadline), "rank 0 never ran; output:\n%s", r.output())
		time.Sleep(200 * time.Millisecond)
	}
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
