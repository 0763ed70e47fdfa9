package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The notification and tracker keys load; each bad value is one error on
// its own line with a fix, and no error quotes the webhook's URL (its
// secret).
func TestLoadNotifyKeys(t *testing.T) {
	dir := t.TempDir()
	load := func(lines ...string) (*Config, error) {
		job := filepath.Join(dir, "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lines, hostA)), 0o644))
		return Load(job, LoadOptions{})
	}
	cfg, err := load(`on_event = ["./notify.sh", "--to", "ops"]`, `webhook = "https://hooks.example.com/T0/B0/secret"`,
		`webhook_format = "slack"`, `notify = ["restarted", "hang", "failed"]`, `tracker = "wandb"`)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "notify.sh"), "--to", "ops"}, cfg.Job.OnEvent, "a relative program is the job file's directory's")
	assert.Equal(t, "https://hooks.example.com/T0/B0/secret", cfg.Job.Webhook)
	assert.Equal(t, WebhookSlack, cfg.Job.WebhookFormat)
	assert.Equal(t, []string{"restarted", "hang", "failed"}, cfg.Job.Notify)
	assert.Equal(t, TrackerWandb, cfg.Job.Tracker)

	cfg, err = load(`on_event = ["logger", "-t", "drover"]`)
	require.NoError(t, err)
	assert.Equal(t, []string{"logger", "-t", "drover"}, cfg.Job.OnEvent, "a program on PATH stays as written")
	assert.Equal(t, WebhookJSON, cfg.Job.WebhookFormat, "the default format")
	assert.Empty(t, cfg.Job.Notify)
	assert.Empty(t, cfg.Job.Tracker)

	for _, tc := range []struct {
		lines []string
		line  int
		msg   string
		fix   string
	}{
		{lns(`on_event = []`), 5, "program (first element) is missing", "on_event = ["},
		{lns(`on_event = "./notify.sh"`), 5, "array of strings", ""},
		{lns(`webhook = "ftp://hooks.example.com/secret"`), 5, `http or https URL, not "ftp"`, "https://"},
		{lns(`webhook = "hooks.example.com/secret"`), 5, "http or https URL", ""},
		{lns(`webhook = "https://ho st/secret%zz"`), 5, "not a URL", ""},
		{lns(`webhook_format = "slak"`), 5, `unknown webhook format "slak"`, `did you mean webhook_format = "slack"?`},
		{lns(`max_restarts = 1`, `notify = ["restarted", "hostlost"]`), 6, `unknown event kind "hostlost"`, `did you mean "host_lost"?`},
		{lns(`tracker = "wandb2"`), 5, `unknown tracker "wandb2"`, `did you mean tracker = "wandb"?`},
	} {
		_, err := load(tc.lines...)
		ces := configErrors(t, err)
		require.Len(t, ces, 1, "%v", err)
		assert.Equal(t, tc.line, ces[0].Line, "%v", ces[0])
		assert.Contains(t, ces[0].Error(), tc.msg)
		assert.Contains(t, ces[0].Fix, tc.fix)
		assert.NotContains(t, ces[0].Error(), "secret", "the webhook's URL is not quoted")
	}
}
