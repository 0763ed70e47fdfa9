package notify

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
)

// logs collects what a Notifier reports, as the run's event log would.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755))
	return p
}

// on_event gets each wanted event's JSON on its stdin, in order, in the
// job file's directory and with the event named in its environment; the
// webhook gets the same events Slack-shaped; kinds notify does not list
// go nowhere.
func TestNotifierDelivers(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "notify.sh", `cat >> got.jsonl; echo "$DROVER_EVENT $DROVER_RUN_ID" >> env.txt`)
	var mu sync.Mutex
	var posts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, r.Header.Get("Content-Type")+" "+string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	var l logs
	n := New(Options{OnEvent: []string{"./notify.sh"}, Dir: dir, Webhook: srv.URL + "/hook", Format: config.WebhookSlack,
		Notify: []string{"started", "restarted", "hang", "failed"}, Logf: l.logf})
	events := goldenEvents()
	for _, e := range events {
		n.Send(e)
	}
	n.Close(30 * time.Second)
	assert.Empty(t, l.all())

	var want []Event
	for _, e := range events {
		if Wanted([]string{"started", "restarted", "hang", "failed"}, e.Kind) {
			want = append(want, e)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "got.jsonl"))
	require.NoError(t, err)
	var wantJSON, wantPosts, wantEnv []string
	for _, e := range want {
		wantJSON = append(wantJSON, string(e.JSON()))
		wantPosts = append(wantPosts, "application/json "+string(Body(e, config.WebhookSlack)))
		wantEnv = append(wantEnv, string(e.Kind)+" "+e.RunID+"\n")
	}
	assert.Equal(t, strings.Join(wantJSON, ""), string(got))
	env, _ := os.ReadFile(filepath.Join(dir, "env.txt"))
	assert.Equal(t, strings.Join(wantEnv, ""), string(env))
	mu.Lock()
	assert.Equal(t, wantPosts, posts)
	mu.Unlock()
	for _, p := range posts {
		var m map[string]string
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(p, "application/json ")), &m))
		assert.Equal(t, []string{"text"}, keys(m), "Slack's shape: {\"text\": ...}")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A command that fails and a webhook that refuses are each reported once
// however many events fail, with the command's output and without the
// webhook's URL (its secret).
func TestNotifierFailureToldOnce(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no_service", http.StatusNotFound)
	}))
	defer srv.Close()
	var l logs
	n := New(Options{OnEvent: []string{script(t, dir, "bad.sh", "echo oops >&2; exit 3")}, Webhook: srv.URL + "/T0/B0/secret-token",
		Format: config.WebhookJSON, Logf: l.logf})
	for _, e := range goldenEvents() {
		n.Send(e)
	}
	n.Close(30 * time.Second)
	lines := l.all()
	require.Len(t, lines, 2, "%q", lines)
	assert.Contains(t, lines[0], "on_event failed")
	assert.Contains(t, lines[0], "exit status 3: oops")
	assert.Contains(t, lines[1], "webhook failed")
	assert.Contains(t, lines[1], "404")
	for _, s := range lines {
		assert.NotContains(t, s, "secret-token")
	}

	// A webhook nobody listens on: net/http's error names the URL; the
	// report does not.
	l = logs{}
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL + "/T0/B0/secret-token"
	closed.Close()
	n = New(Options{Webhook: url, Logf: l.logf})
	n.Send(goldenEvents()[0])
	n.Close(30 * time.Second)
	require.Len(t, l.all(), 1)
	assert.Contains(t, l.all()[0], "webhook failed")
	assert.NotContains(t, l.all()[0], "secret-token")
}

// A command that never ends is killed at the timeout with what it
// started; Send never blocks the run meanwhile: past the queue's length
// events are dropped and counted; Close gives up on the queue after its
// wait.
func TestNotifierNeverHoldsTheRun(t *testing.T) {
	dir := t.TempDir()
	hang := script(t, dir, "hang.sh", "echo $$ > pid; sleep 1000 & wait")
	var l logs
	n := New(Options{OnEvent: []string{hang}, Dir: dir, Timeout: 300 * time.Millisecond, Queue: 2, Logf: l.logf})
	start := time.Now()
	for i := 0; i < 50; i++ {
		n.Send(Event{Kind: Started, Attempt: i})
	}
	assert.Less(t, time.Since(start), 200*time.Millisecond, "Send does not wait for delivery")
	n.Close(2 * time.Second)
	assert.Less(t, time.Since(start), 5*time.Second, "Close is bounded")
	lines := strings.Join(l.all(), "\n")
	assert.Contains(t, lines, "no exit after 300ms, killed")
	assert.Contains(t, lines, "dropping started")
	assert.Regexp(t, `\d+ event\(s\) were dropped`, lines)
	assert.Equal(t, 1, strings.Count(lines, "on_event failed"), lines)

	// Nothing of the command is left: its process group was killed.
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	require.NoError(t, err)
	pgid := strings.TrimSpace(string(b))
	testenv.WaitFor(t, 10*time.Second, "on_event's process group "+pgid+" to be gone", func() bool {
		out, _ := exec.Command("pgrep", "-g", pgid).Output()
		return len(out) == 0
	})
}

// A nil Notifier (a job without on_event and webhook) takes events and
// does nothing.
func TestNotifierNone(t *testing.T) {
	n := New(Options{Notify: []string{"failed"}})
	assert.Nil(t, n)
	n.Send(Event{Kind: Failed})
	n.Close(time.Second)
}
