package watch

// Fleet test of a run's notifications and its lasting run id (issue 40,
// items 4 and 5), on a detached run: the background supervisor is the
// one that tells.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// notifyScript fails rank 1 in the first attempt (a restart with a root
// cause), goes silent in the second (a hang) and succeeds in the third;
// every process first prints the run id and attempt it was given.
const notifyScript = `
echo "id=$DROVER_RUN_ID attempt=$DROVER_ATTEMPT rank=$RANK"
case $DROVER_ATTEMPT in
1) if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1000;;
2) sleep 1000;;
esac
echo "done rank=$RANK"
`

// A detached run's supervisor runs on_event for every event with one
// JSON object on its stdin (started, restarted with the root cause, the
// hang, restarted again, finished: one run id throughout) and POSTs the
// same events Slack-shaped to the webhook, a server in this process; every
// process of every attempt printed that run id.
func TestRunDetachedNotifies(t *testing.T) {
	fleettest.Need(t, fleet)
	var mu sync.Mutex
	var posts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	j := kit.NewFleetJob(t, kit.JobSpec{Script: notifyScript, Hosts: 2, Job: fmt.Sprintf(`max_restarts = 3
hang_timeout = "3s"
on_event = ["./on-event.sh", "arg"]
webhook = %q
webhook_format = "slack"`, srv.URL+"/services/T0/B0/x")})
	// Relative to the job file, wherever the supervisor runs.
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "on-event.sh"), []byte("#!/bin/sh\ncat >> events.jsonl\n"), 0o755))
	kit.StartDetachedRun(t, j)

	file := filepath.Join(j.Dir, "events.jsonl")
	var events []map[string]any
	testenv.Wait(t, 120*time.Second, "on_event to receive finished", func() (bool, string) {
		events = kit.ReadEvents(t, file)
		for _, e := range events {
			if e["event"] == "finished" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(events))
	})
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e["event"].(string))
		for _, k := range []string{"event", "job", "run_id", "attempt", "time", "message"} {
			assert.Contains(t, e, k, "%v", e)
		}
		assert.Equal(t, j.Name, e["job"])
	}
	assert.Equal(t, []string{"started", "restarted", "hang", "restarted", "finished"}, kinds)
	id, _ := events[0]["run_id"].(string)
	assert.Regexp(t, `^\d{8}-\d{6}-[0-9a-f]{6}$`, id)
	for _, e := range events {
		assert.Equal(t, id, e["run_id"], "one run id: %v", e)
	}
	if len(events) == 5 {
		first := events[1]
		assert.Equal(t, float64(1), first["attempt"])
		assert.Equal(t, "worker-1", first["process"])
		assert.Equal(t, float64(1), first["rank"])
		assert.Equal(t, fleet.Hosts[1].Name, first["host"])
		assert.Contains(t, first["root_cause"], "exited 3")
		assert.Regexp(t, `group hung: no process showed progress for \d+s \(hang_timeout = 3s\)`, events[2]["message"])
		assert.Equal(t, float64(2), events[2]["attempt"])
		assert.Contains(t, events[3]["root_cause"], "group hung")
		assert.Equal(t, float64(3), events[4]["attempt"])
	}

	// The webhook got the same events, each {"text": ...}.
	testenv.WaitFor(t, 30*time.Second, "the webhook to receive every event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(posts) >= len(events)
	})
	mu.Lock()
	got := append([]string(nil), posts...)
	mu.Unlock()
	require.Len(t, got, len(events))
	for i, p := range got {
		var m map[string]string
		require.NoError(t, json.Unmarshal([]byte(p), &m), p)
		require.Len(t, m, 1, p)
		assert.Regexp(t, fmt.Sprintf(`^drover: job %s \(run %s, attempt \d\): %s`, regexp.QuoteMeta(j.Name), id, kinds[i]), m["text"])
	}

	// Every process printed the run's id, in each of the three attempts.
	for n := 1; n <= 3; n++ {
		for r := range 2 {
			assert.Contains(t, j.LogFile(t, n, fmt.Sprintf("worker-%d", r)), fmt.Sprintf("id=%s attempt=%d rank=%d\n", id, n, r))
		}
	}
}
