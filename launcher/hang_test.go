package launcher

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/cause"
	"github.com/droverhq/drover/launcher/plan"
)

// A step of the controller's wall clock (NTP, a resumed VM) is neither a
// hang nor a paused controller: both are measured on the monotonic clock
// (runner.mono). A +40 s step once declared a healthy group hung (issue
// 30 item 10). The clocks are injected: the wall clock jumps, the
// monotonic one moves a second.
func TestHangAndPauseIgnoreWallClockStep(t *testing.T) {
	wall := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mono time.Duration
	var events bytes.Buffer
	r := &runner{now: func() time.Time { return wall }, mono: func() time.Duration { return mono }}
	r.events = &eventLog{w: &events, now: r.now}
	a := &attempt{r: r, cfg: &config.Config{Job: config.Job{HangTimeout: 10 * time.Second, StopGrace: time.Second}}, n: 1, total: 1}
	rp := &running{p: plan.Process{Role: plan.RoleWorker, Host: config.Host{Name: "h0"}}, ctl: newControl()}
	s := &supervisor{a: a, procs: []*running{rp}, remaining: 1, causes: cause.New(0)}

	progressWriter{rp, r.mono}.Write([]byte("step 1\n"))
	s.ping()
	wall = wall.Add(40 * time.Second)
	mono += time.Second
	s.checkHang()
	s.checkPaused()
	require.Nil(t, s.out, "after a wall-clock step: %s", events.String())

	// Ten silent seconds on the monotonic clock are a hang.
	mono += 10 * time.Second
	s.checkHang()
	require.NotNil(t, s.out)
	assert.Equal(t, outcomeHung, s.out.kind)
	assert.Contains(t, events.String(), "no process showed progress for 11s (hang_timeout = 10s); the last was worker-0@h0 at 03:04:34.000")
}
