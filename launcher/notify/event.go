package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster/config"
)

// Kind is what happened: one of config.NotifyKinds, which the job's
// notify key picks from.
type Kind string

// The kinds of event.
const (
	// Started: every process of the run's first attempt runs.
	Started Kind = "started"
	// Restarted: the group failed, or drover stopped it on purpose at a
	// checkpoint (a straggler replaced, a regrow: restart.Restarted),
	// and it starts again; RootCause says why.
	Restarted Kind = "restarted"
	// Hang: no process showed progress for hang_timeout.
	Hang Kind = "hang"
	// Straggler: one rank is far slower than its peers (package
	// launcher/straggler); Host, Process and Rank name it.
	Straggler Kind = "straggler"
	// HostLost: a host went away (or a spare stood in for it).
	HostLost Kind = "host_lost"
	// Health: a GPU health finding on Host.
	Health Kind = "health"
	// Finished: the run succeeded.
	Finished Kind = "finished"
	// Failed: the run failed for good.
	Failed Kind = "failed"
	// Stopped: the run was interrupted or stopped (Ctrl-C, drover stop).
	Stopped Kind = "stopped"
)

// Kinds are every kind, in config.NotifyKinds' order.
var Kinds = []Kind{Started, Restarted, Hang, Straggler, HostLost, Health, Finished, Failed, Stopped}

// Event is one thing the run did, as it is sent. Job and RunID name the
// run; the fields after Message are set where the kind has them.
type Event struct {
	Kind    Kind
	Job     string
	RunID   string
	Attempt int
	Time    time.Time
	// Message is drover's own event line for it, without the timestamp.
	Message string
	// Host, Process and Rank name where it happened (Rank < 0, or
	// HasRank false: none).
	Host    string
	Process string
	Rank    int
	HasRank bool
	// RootCause is why the group failed (restarted, failed): the first
	// process's end as drover's summary names it; for a planned restart,
	// that it was planned, not a failure, and why.
	RootCause string
	// Checkpoint is the newest complete checkpoint when the event
	// happened: what a restart resumes from.
	Checkpoint string
}

// wire is Event as JSON: the keys docs/notifications.md lists.
type wire struct {
	Event      Kind   `json:"event"`
	Job        string `json:"job"`
	RunID      string `json:"run_id"`
	Attempt    int    `json:"attempt"`
	Time       string `json:"time"`
	Message    string `json:"message"`
	Host       string `json:"host,omitempty"`
	Process    string `json:"process,omitempty"`
	Rank       *int   `json:"rank,omitempty"`
	RootCause  string `json:"root_cause,omitempty"`
	Checkpoint string `json:"checkpoint,omitempty"`
}

// JSON is the event as on_event reads it on its stdin and webhook_format
// = "json" posts it: one object, one line, ending in a newline.
func (e Event) JSON() []byte {
	w := wire{Event: e.Kind, Job: e.Job, RunID: e.RunID, Attempt: e.Attempt,
		Time: e.Time.UTC().Format(time.RFC3339Nano), Message: e.Message,
		Host: e.Host, Process: e.Process, RootCause: e.RootCause, Checkpoint: e.Checkpoint}
	if e.HasRank && e.Rank >= 0 {
		r := e.Rank
		w.Rank = &r
	}
	b, _ := json.Marshal(w) // strings and numbers only: cannot fail
	return append(b, '\n')
}

// Text is the event as one message for a person (Slack's text): the
// job, the run and what happened, then the root cause and the checkpoint
// where the event has them.
func (e Event) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drover: job %s (run %s, attempt %d): %s", e.Job, e.RunID, e.Attempt, e.Kind)
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RootCause != "" && !strings.Contains(e.Message, e.RootCause) {
		b.WriteString("\nroot cause: " + e.RootCause)
	}
	if e.Checkpoint != "" {
		b.WriteString("\ncheckpoint: " + e.Checkpoint)
	}
	return b.String()
}

// Body is what the webhook POSTs for e in format (config.WebhookJSON or
// config.WebhookSlack), and its content type.
func Body(e Event, format string) []byte {
	if format == config.WebhookSlack {
		b, _ := json.Marshal(struct {
			Text string `json:"text"`
		}{e.Text()})
		return append(b, '\n')
	}
	return e.JSON()
}

// Wanted says whether kind k is sent under the job's notify list (empty:
// every kind).
func Wanted(notify []string, k Kind) bool {
	if len(notify) == 0 {
		return true
	}
	for _, n := range notify {
		if Kind(n) == k {
			return true
		}
	}
	return false
}
