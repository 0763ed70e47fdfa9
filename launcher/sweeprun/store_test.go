package sweeprun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/sweep"
)

// Save writes the same record on every host at once, each host from a
// goroutine of its own: every copy is the whole record, one line, and
// (under -race) no two writers share a buffer.
func TestStoreSavesOnEveryHost(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	s := &Store{}
	for _, name := range []string{"h0", "h1", "h2", "h3"} {
		tr, err := cluster.NewLocal(cluster.Endpoint{Name: name})
		require.NoError(t, err)
		fsys, err := tr.FS(context.Background())
		require.NoError(t, err)
		s.hosts = append(s.hosts, storeHost{name: name, t: tr, fs: fsys, wd: filepath.Join(home, name)})
	}
	rec := &sweep.Record{Version: sweep.RecordVersion, ID: "job-20260101-000000", Key: "00ff", State: sweep.SweepRunning,
		Params: []string{"lr"}, Metric: "loss", Goal: sweep.Minimize}
	for i := range 40 { // a record large enough that its encoding has spare capacity
		rec.Trials = append(rec.Trials, sweep.TrialRecord{Result: sweep.Result{ID: fmt.Sprintf("t%02d", i), State: sweep.Pending,
			Params: map[string]string{"lr": "0.001"}}})
	}
	require.NoError(t, s.Save(rec))
	var first []byte
	for _, h := range s.hosts {
		b, err := os.ReadFile(filepath.Join(h.wd, StateDir, recordFile))
		require.NoError(t, err, h.name)
		assert.Equal(t, 1, countNewlines(b), "%s: one line", h.name)
		if first == nil {
			first = b
		}
		assert.Equal(t, string(first), string(b), "%s holds the same record", h.name)
	}
}

func countNewlines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}
