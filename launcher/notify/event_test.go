package notify

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// goldenEvents are one event of each kind as the run core makes them.
func goldenEvents() []Event {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.FixedZone("CET", 3600))
	base := Event{Job: "mnist", RunID: "20260102-020405-a1b2c3", Attempt: 1, Time: at}
	ev := func(k Kind, attempt int, msg string, f func(*Event)) Event {
		e := base
		e.Kind, e.Attempt, e.Message = k, attempt, msg
		if f != nil {
			f(&e)
		}
		return e
	}
	return []Event{
		ev(Started, 1, "attempt 1/4: started 4 process(es) on 2 host(s)", nil),
		ev(Hang, 2, "group hung: no process showed progress for 30s (hang_timeout = 30s)", func(e *Event) {
			e.Checkpoint = "checkpoints/step-100"
		}),
		ev(Restarted, 2, "attempt 3/4: restarting the whole group in 2s", func(e *Event) {
			e.RootCause = "worker-3 on gpu-b: RuntimeError: CUDA out of memory (train.py:212)"
			e.Host, e.Process, e.Rank, e.HasRank = "gpu-b", "worker-3", 3, true
			e.Checkpoint = "checkpoints/step-100"
		}),
		ev(HostLost, 3, "gpu-b (10.0.0.12) unreachable; replaced by spare gpu-c", func(e *Event) { e.Host = "gpu-b" }),
		ev(Health, 3, "GPU health: gpu-a GPU 1: Xid 79 (fallen off the bus)", func(e *Event) { e.Host = "gpu-a" }),
		ev(Finished, 4, "attempt 4/4: job mnist succeeded", func(e *Event) { e.Checkpoint = "checkpoints/step-900" }),
		ev(Failed, 4, "job mnist failed: max_restarts (3) reached", func(e *Event) {
			e.RootCause = "worker-0 on gpu-a: exit 1"
			e.Host, e.Process, e.Rank, e.HasRank = "gpu-a", "worker-0", 0, true
		}),
		ev(Stopped, 2, "interrupted: every process stopped", nil),
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(file, got, 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "run go test ./launcher/notify -update to create it")
	assert.Equal(t, string(want), string(got), "differs from %s (rerun with -update if intended)", file)
}

// The JSON an on_event command reads and a json webhook gets, and the
// Slack body, for one event of each kind, are pinned: they are an
// interface users' scripts parse.
func TestEventGolden(t *testing.T) {
	var js, slack bytes.Buffer
	for _, e := range goldenEvents() {
		js.Write(Body(e, config.WebhookJSON))
		slack.Write(Body(e, config.WebhookSlack))
	}
	checkGolden(t, "events.jsonl", js.Bytes())
	checkGolden(t, "slack.jsonl", slack.Bytes())
}

// Every event is one JSON object on one line with the common keys; rank
// 0 is a rank, not an absent one, and absent fields are left out.
func TestEventJSONKeys(t *testing.T) {
	for _, e := range goldenEvents() {
		b := e.JSON()
		require.Equal(t, 1, bytes.Count(b, []byte("\n")), "%s", b)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), "%s", b)
		for _, k := range []string{"event", "job", "run_id", "attempt", "time", "message"} {
			assert.Contains(t, m, k, "%s", b)
		}
		assert.Equal(t, string(e.Kind), m["event"])
		_, err := time.Parse(time.RFC3339Nano, m["time"].(string))
		assert.NoError(t, err)
		if e.HasRank {
			assert.Equal(t, float64(e.Rank), m["rank"], "%s", b)
		} else {
			assert.NotContains(t, m, "rank", "%s", b)
		}
		if e.RootCause == "" {
			assert.NotContains(t, m, "root_cause", "%s", b)
		}
	}
}

// The kinds are the job file's: a kind notify accepts is one drover
// sends, and the reverse.
func TestKindsAreTheJobFiles(t *testing.T) {
	var ks []string
	for _, k := range Kinds {
		ks = append(ks, string(k))
	}
	assert.Equal(t, config.NotifyKinds, ks)
}

func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		notify []string
		kind   Kind
		want   bool
	}{
		{nil, Started, true},
		{[]string{}, Stopped, true},
		{[]string{"restarted", "failed"}, Restarted, true},
		{[]string{"restarted", "failed"}, Failed, true},
		{[]string{"restarted", "failed"}, Started, false},
		{[]string{"hang"}, HostLost, false},
	} {
		assert.Equal(t, tc.want, Wanted(tc.notify, tc.kind), "%v %s", tc.notify, tc.kind)
	}
}
