package longrun

import (
	"path"
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
	"github.com/droverhq/drover/launcher/runview"
)

// batchesScript prints a first batch, waits for the file "go" in its
// workdir (the test creates it), prints a second batch and idles.
const batchesScript = `
for i in 1 2 3; do echo "first=$i rank=$RANK"; done
while [ ! -e go ]; do sleep 0.1; done
for i in 1 2 3; do echo "second=$i rank=$RANK"; done
exec sleep 600
`

// drover logs --since with a cut between two batches of output prints the
// second batch only; a cut before both prints both; a log whose time index
// is gone is printed whole, which one line says.
func TestLogsSince(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: batchesScript, Hosts: 2})
	kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 30*time.Second, "2 running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	logs := func(args ...string) (string, string) {
		out, errs, code := kit.DroverIn(t, j, t.TempDir(), 30*time.Second, append([]string{"logs", j.Path}, args...)...)
		require.Equal(t, 0, code, errs)
		return out, errs
	}
	firstDone := regexp.MustCompile(`(?m)^\[worker-0@\S+\] first=3 rank=0\n(?s:.*)^\[worker-1@\S+\] first=3 rank=1$`)
	testenv.Wait(t, 30*time.Second, "the first batch", func() (bool, string) {
		out, _ := logs()
		return firstDone.MatchString(out), "\n" + out
	})
	// A cut now may fall in the first batch's segment of the time index
	// (its resolution is a second): ask again with a later cut until it
	// leaves the first batch out. Then no write happened since the cut.
	var cut string
	testenv.Wait(t, 30*time.Second, "a --since cut that leaves the first batch out", func() (bool, string) {
		cut = time.Now().UTC().Format(time.RFC3339Nano)
		out, _ := logs("--since", cut)
		if !strings.Contains(out, "first=") {
			require.Empty(t, out)
			return true, ""
		}
		return false, "--since " + cut + " printed:\n" + out
	})
	for i := range 2 {
		_, err := fleet.Exec(i, "touch", path.Join(kit.HostHome, j.Workdir, "go"))
		require.NoError(t, err)
	}
	secondDone := regexp.MustCompile(`second=3 rank=0\n(?s:.*)second=3 rank=1\n|second=3 rank=1\n(?s:.*)second=3 rank=0\n`)
	var out string
	testenv.Wait(t, 30*time.Second, "the second batch", func() (bool, string) {
		out, _ = logs("--since", cut)
		return secondDone.MatchString(out), "\n" + out
	})
	assert.NotContains(t, out, "first=", "--since %s", cut)
	assert.Regexp(t, `(?m)^\[worker-0@\S+\] second=1 rank=0$`, out)

	// attach --since: the same cut, then live.
	att := kit.StartDroverArgs(t, j, "attach", j.Path, "--since", cut)
	att.WaitOutput(t, regexp.MustCompile(`second=3 rank=1\n`), 30*time.Second)
	att.WaitOutput(t, regexp.MustCompile(`second=3 rank=0\n`), 30*time.Second)
	att.Signal(t, syscall.SIGINT)
	require.Equal(t, 0, att.Wait(t, 10*time.Second))
	assert.NotContains(t, att.Stdout.String(), "first=")

	// A duration back to before the run: both batches, once each.
	all, errs := logs("--since", "1h")
	assert.Equal(t, 2, strings.Count(all, "first=1 "), all)
	assert.Equal(t, 2, strings.Count(all, "second=1 "), all)
	assert.Empty(t, errs)

	// No time index (an older agent wrote the log): the whole log, said.
	st := kit.Status(t, j)
	_, err := fleet.Exec(0, "sh", "-c", "rm "+path.Join(kit.HostHome, j.Workdir, ".drover/runs", st.RunID, "attempt-1", "*.times"))
	require.NoError(t, err)
	out, errs = logs("--since", cut, "--rank", "0")
	assert.Contains(t, out, "first=1 rank=0")
	assert.Contains(t, out, "second=1 rank=0")
	assert.Regexp(t, `(?m)^drover: --since: 1 log\(s\) have no time index .*: printing them from the start$`, errs)
	assert.Equal(t, 1, strings.Count(errs, "\n"), errs)

	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	kit.WaitNoJobProcs(t, j.Name, 5*time.Second)
}

// --since takes a Go duration or an RFC3339 time, and nothing else.
func TestParseSince(t *testing.T) {
	s, err := runview.ParseSince("10m")
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, s.Ago)
	s, err = runview.ParseSince("2026-03-12T12:00:00Z")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 3, 12, 12, 0, 0, 0, time.UTC), s.At.UTC())
	for _, bad := range []string{"yesterday", "-5m", "0s", "12:00"} {
		_, err := runview.ParseSince(bad)
		assert.Error(t, err, bad)
	}
}
