package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Tracker is the job's tracker key: the experiment tracker whose run ids
// drover sets from its own run id, so that a tracker's curves continue
// across restarts.
type Tracker string

// TrackerWandb is Weights & Biases: WANDB_RUN_ID and WANDB_RESUME=allow
// on the lead process, WANDB_RUN_GROUP on every process.
const TrackerWandb Tracker = "wandb"

// The webhook's body formats (webhook_format).
const (
	// WebhookJSON posts the event's JSON object, as on_event reads it.
	WebhookJSON = "json"
	// WebhookSlack posts {"text": ...}, what a Slack incoming webhook
	// (and Mattermost's, and Discord's /slack endpoint) takes.
	WebhookSlack = "slack"
)

// NotifyKinds are the kinds of event notify may pick, in the order
// docs/notifications.md lists them; package launcher/notify sends them
// (its tests keep the two lists equal).
var NotifyKinds = []string{"started", "restarted", "hang", "straggler", "host_lost", "health", "finished", "failed", "stopped"}

// notifyReader reads a job's notification keys: a concern of its own,
// beside jobReader's.
type notifyReader struct{ *walker }

// notifications reads the notification and tracker keys: on_event,
// webhook, webhook_format, notify and tracker.
func (w notifyReader) notifications(t tbl, j *Job, dir string) {
	if args, ok := w.strList(t, "on_event"); ok {
		j.OnEvent = w.onEvent(t, args, dir)
	}
	if s, ok := w.str(t, "webhook"); ok {
		if err := checkWebhook(s); err != nil {
			w.add(t.key("webhook"), err.Error(), "write an http or https URL: "+t.schema.example("webhook"))
		} else {
			j.Webhook = s
		}
	}
	if s, ok := w.enum(t, "webhook_format", WebhookJSON, WebhookSlack); ok {
		j.WebhookFormat = s
	}
	if kinds, ok := w.strList(t, "notify"); ok {
		j.Notify = w.notifyKinds(t, kinds)
	}
	if s, ok := w.enum(t, "tracker", string(TrackerWandb)); ok {
		j.Tracker = Tracker(s)
	}
}

// onEvent checks on_event's command; a relative program with a slash in
// it ("./notify.sh") is the job file's directory's, wherever drover runs.
func (w notifyReader) onEvent(t tbl, args []string, dir string) []string {
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" {
		w.add(t.key("on_event"), "the program (first element) is missing", "write "+t.schema.example("on_event"))
		return nil
	}
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			w.add(t.key("on_event"), fmt.Sprintf("element %d contains a NUL byte, which no program can receive as an argument", i+1),
				`remove the \u0000 from the element`)
			return nil
		}
	}
	if strings.Contains(args[0], "/") || strings.HasPrefix(args[0], "~") {
		p, err := expandLocal(args[0], dir)
		if err != nil {
			w.add(t.key("on_event"), err.Error(), "write an absolute path instead")
			return nil
		}
		args[0] = p
	}
	return args
}

// notifyKinds checks notify's kinds, with a did-you-mean for a misspelt
// one.
func (w notifyReader) notifyKinds(t tbl, kinds []string) []string {
	for _, k := range kinds {
		if slices.Contains(NotifyKinds, k) {
			continue
		}
		fix := fmt.Sprintf("the kinds are %s", strings.Join(NotifyKinds, ", "))
		if sg := suggest(k, NotifyKinds); sg != "" {
			fix = fmt.Sprintf("did you mean %q? (%s)", sg, fix)
		}
		w.add(t.key("notify"), fmt.Sprintf("unknown event kind %q", k), fix)
		return nil
	}
	return kinds
}

// checkWebhook says why s is not a URL drover can POST to. Its errors
// never quote s: a webhook's URL is its secret (Slack's is the token).
func checkWebhook(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("webhook is not a URL (%s)", strings.ReplaceAll(err.Error(), s, "<the URL>"))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("webhook must be an http or https URL, not %q", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("webhook has no host")
	}
	return nil
}
