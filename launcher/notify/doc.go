// Package notify tells someone what a run did: for each of the run's
// events (started, restarted with its root cause, a hang, a lost host, a
// GPU health finding, how it ended) it runs the job's on_event command on
// the controller with one JSON object on its stdin, and POSTs the same
// object (or, for Slack, {"text": ...}) to the job's webhook.
//
// The mapping from an event to what is sent (Event.JSON, Event.Text,
// Body) is pure, with golden files under testdata. The delivery
// (Notifier) is a worker goroutine behind a bounded queue: Send never
// blocks the run (a full queue drops the event and counts it), each
// command and each POST is bounded in time, and a failing command or
// webhook is reported once per run, not once per event. The run core
// (package launcher) feeds it typed events where it decides them; it
// imports nothing of the core.
package notify
