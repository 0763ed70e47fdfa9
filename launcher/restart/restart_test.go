package restart

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		restarts  int
		want      time.Duration
	}{
		{time.Second, 30 * time.Second, 1, time.Second},
		{time.Second, 30 * time.Second, 2, 2 * time.Second},
		{time.Second, 30 * time.Second, 3, 4 * time.Second},
		{time.Second, 30 * time.Second, 5, 16 * time.Second},
		{time.Second, 30 * time.Second, 6, 30 * time.Second},
		{time.Second, 30 * time.Second, 100, 30 * time.Second},
		{200 * time.Millisecond, 200 * time.Millisecond, 4, 200 * time.Millisecond},
		{0, 0, 3, 0},
	}
	for _, tt := range tests {
		job := config.Job{RestartBackoff: tt.base, RestartBackoffMax: tt.max}
		assert.Equal(t, tt.want, Backoff(job, tt.restarts), "base %s max %s restart %d", tt.base, tt.max, tt.restarts)
	}
}

func TestRetryable(t *testing.T) {
	exited := func(code int) Outcome { return Outcome{Kind: Failed, ExitCode: code} }
	lost := Outcome{Kind: HostLost, ExitCode: -1}
	hung := Outcome{Kind: Hung, ExitCode: -1}
	setup := Outcome{Kind: SetupFailed, ExitCode: -1, Err: errors.New("preflight")}
	// A connection that died during setup is a lost host (the launcher's
	// setupFailed).
	setupLost := Outcome{Kind: HostLost, ExitCode: -1, Err: errors.New("push to h1: connection lost")}
	setupConfig := Outcome{Kind: SetupFailed, ExitCode: -1, Err: config.ConfigErrors{{File: "job.toml", Msg: "bad"}}}
	setupFinal := Outcome{Kind: SetupFailed, ExitCode: -1, Err: errors.New("h1: auth"), Permanent: true}
	onFailure := config.Job{RestartPolicy: config.RestartOnFailure}
	lists := config.Job{RestartPolicy: config.RestartExitCode, RetryExitCodes: []int{75}, FatalExitCodes: []int{137}}
	never := config.Job{RestartPolicy: config.RestartNever, RetryExitCodes: []int{75}}
	tests := []struct {
		job     config.Job
		out     Outcome
		attempt int
		retry   bool
		why     string
	}{
		{onFailure, exited(1), 1, true, ""},
		{onFailure, exited(137), 1, true, ""},
		{onFailure, lost, 1, true, ""},
		{onFailure, hung, 1, true, ""},
		{onFailure, setup, 1, false, "could not be set up"},
		// A setup error at a restart (a push that failed once) is retried;
		// configuration errors and refusals are not.
		{onFailure, setup, 2, true, ""},
		{onFailure, setupConfig, 2, false, "could not be set up"},
		{onFailure, setupFinal, 2, false, "could not be set up"},
		{onFailure, setupLost, 1, true, ""},
		{config.Job{}, exited(2), 1, true, ""}, // the default is on-failure
		{config.Job{RestartPolicy: config.RestartNever}, exited(1), 1, false, `restart_policy = "never"`},
		{config.Job{RestartPolicy: config.RestartNever}, lost, 1, false, `restart_policy = "never"`},
		{config.Job{RestartPolicy: config.RestartExitCode}, exited(1), 1, false, `exit status 1 is permanent under restart_policy = "exit-code"`},
		{config.Job{RestartPolicy: config.RestartExitCode}, exited(127), 1, false, "exit status 127 is permanent"},
		{config.Job{RestartPolicy: config.RestartExitCode}, exited(128), 1, true, ""},
		{config.Job{RestartPolicy: config.RestartExitCode}, exited(255), 1, true, ""},
		{config.Job{RestartPolicy: config.RestartExitCode}, lost, 1, true, ""},
		{config.Job{RestartPolicy: config.RestartExitCode}, setup, 1, false, "could not be set up"},
		{config.Job{RestartPolicy: config.RestartExitCode}, setupLost, 1, true, ""},
		// retry_exit_codes and fatal_exit_codes win over the policy.
		{lists, exited(75), 1, true, ""},
		{lists, exited(3), 1, false, "exit status 3 is permanent"},
		{lists, exited(137), 1, false, "exit status 137 is in fatal_exit_codes"},
		{lists, exited(143), 1, true, ""},
		{config.Job{FatalExitCodes: []int{2}}, exited(2), 1, false, "exit status 2 is in fatal_exit_codes"},
		{config.Job{FatalExitCodes: []int{2}}, exited(3), 1, true, ""},
		{never, exited(75), 1, true, ""},
		{never, exited(76), 1, false, `restart_policy = "never"`},
	}
	for _, tt := range tests {
		retry, why := Retryable(tt.job, tt.out, tt.attempt)
		assert.Equal(t, tt.retry, retry, "%+v %+v attempt %d", tt.job, tt.out, tt.attempt)
		if tt.why == "" {
			assert.Empty(t, why)
		} else {
			assert.Contains(t, why, tt.why)
		}
	}
}

// TestBudget: lost hosts and hangs count against max_host_failures, never
// against max_restarts, and the other way round.
func TestBudget(t *testing.T) {
	job := config.Job{MaxRestarts: 1, MaxHostFailures: 2}
	failed := Outcome{Kind: Failed, ExitCode: 1, Err: errors.New("worker-1@b exited 1")}
	lost := Outcome{Kind: HostLost, ExitCode: -1, Err: errors.New("worker-1@b: b lost")}
	hung := Outcome{Kind: Hung, ExitCode: -1, Err: errors.New("group hung")}
	var b Budget
	assert.Equal(t, 2, b.Total(job))
	require.NoError(t, b.Spend(job, lost, 1))
	require.NoError(t, b.Spend(job, failed, 2))
	require.NoError(t, b.Spend(job, hung, 3))
	assert.Equal(t, Budget{Restarts: 1, HostFailures: 2}, b)
	assert.Equal(t, 3, b.Used())
	assert.Equal(t, 4, b.Total(job), "each host failure adds an attempt")
	assert.EqualError(t, b.Spend(job, failed, 4), "worker-1@b exited 1; no restarts left (max_restarts = 1)")
	assert.EqualError(t, b.Spend(job, hung, 4), "group hung; no restarts left for lost hosts and hangs (max_host_failures = 2)")
	assert.EqualError(t, b.Spend(config.Job{RestartPolicy: config.RestartNever}, failed, 5),
		`worker-1@b exited 1; not restarting: restart_policy = "never"`)

	// Issue 41: taking a host back into a shrunk group costs nothing,
	// whatever is left and whatever restart_policy says, and adds an
	// attempt.
	regrow := Outcome{Kind: Regrow, ExitCode: -1, Err: errors.New("c answers again")}
	require.NoError(t, b.Spend(job, regrow, 4))
	require.NoError(t, b.Spend(config.Job{RestartPolicy: config.RestartNever}, regrow, 5))
	assert.Equal(t, Budget{Restarts: 1, HostFailures: 2, Regrows: 2}, b)
	assert.Equal(t, 5, b.Used())
	assert.Equal(t, 6, b.Total(job))

	// Issue 40: putting a spare in a straggler's place costs nothing
	// either, and adds an attempt.
	replaced := Outcome{Kind: Replaced, ExitCode: -1, Err: errors.New("replacing b with spare d")}
	require.NoError(t, b.Spend(job, replaced, 6))
	require.NoError(t, b.Spend(config.Job{RestartPolicy: config.RestartNever}, replaced, 7))
	assert.Equal(t, Budget{Restarts: 1, HostFailures: 2, Regrows: 2, Replaced: 2}, b)
	assert.Equal(t, 7, b.Used())
	assert.Equal(t, 8, b.Total(job))
	assert.True(t, Replaced.Planned() && Regrow.Planned())
	assert.False(t, Failed.Planned() || HostLost.Planned() || Hung.Planned())
}

func TestBreakerJudge(t *testing.T) {
	const from = "step-10"
	fail := errors.New("worker-0@a exited 1")
	var b Breaker
	assert.NoError(t, b.Judge(2, Progress{Ran: true}, fail), "from scratch: not judged")
	assert.NoError(t, b.Judge(2, Progress{Ran: true, Resumed: from}, fail))
	assert.NoError(t, b.Judge(2, Progress{Ran: true, Resumed: from, Newer: true}, fail), "progress resets the count")
	assert.NoError(t, b.Judge(2, Progress{Ran: true, Resumed: from}, fail))
	assert.NoError(t, b.Judge(2, Progress{}, fail), "a setup failure neither counts nor resets")
	assert.NoError(t, b.Judge(2, Progress{Ran: true, Resumed: from, Planned: true}, fail), "a planned restart (a straggler replaced) resets the count")
	assert.NoError(t, b.Judge(2, Progress{Ran: true, Resumed: from}, fail))
	err := b.Judge(2, Progress{Ran: true, Resumed: from}, fail)
	require.Error(t, err)
	assert.Equal(t, "2 restarts in a row made no progress: every attempt resumed from step-10 and failed before a newer checkpoint; "+
		"last failure: worker-0@a exited 1 (fix the failure, or raise max_restarts_without_progress = 2)", err.Error())
	var off Breaker
	for range 5 {
		assert.NoError(t, off.Judge(0, Progress{Ran: true, Resumed: from}, fail), "0 turns it off")
	}
	var one Breaker
	assert.EqualError(t, one.Judge(1, Progress{Ran: true, Resumed: from}, fail), "1 restart in a row made no progress: every attempt resumed from step-10 and failed before a newer checkpoint; "+
		"last failure: worker-0@a exited 1 (fix the failure, or raise max_restarts_without_progress = 1)")
}

// The breaker resets after a planned restart of either kind, as the run
// loop judges it (Progress.Planned = Kind.Planned): a straggler replaced
// and a regrow each follow a new checkpoint, which is progress; an
// attempt that failed, was lost or hung without a newer checkpoint is
// not. limit 2: one restart without progress before the kind, then the
// kind, then one more without progress breaks only if the kind did not
// reset the count.
func TestBreakerPlannedKinds(t *testing.T) {
	const from = "step-10"
	fail := errors.New("worker-0@a exited 1")
	for _, tc := range []struct {
		kind   Kind
		resets bool
	}{
		{Replaced, true},
		{Regrow, true},
		{Failed, false},
		{HostLost, false},
		{Hung, false},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			var b Breaker
			require.NoError(t, b.Judge(3, Progress{Ran: true, Resumed: from}, fail))
			require.NoError(t, b.Judge(3, Progress{Ran: true, Resumed: from, Planned: tc.kind.Planned()}, fail))
			err := b.Judge(3, Progress{Ran: true, Resumed: from}, fail)
			if tc.resets {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, "3 restarts in a row made no progress")
			}
		})
	}
}

// The restarted notification says what happened: a failure that it
// failed, with the failure as the root cause; a planned restart what
// drover did, with a root cause that says it was planned, not a failure.
func TestRestarted(t *testing.T) {
	fail := errors.New("worker-0@a exited 1")
	for _, tc := range []struct {
		name      string
		kind      Kind
		plan      Plan
		err       error
		msg, root string
	}{
		{"a failure", Failed, Plan{}, fail, "attempt 2 failed; attempt 3 starts in 2s", "worker-0@a exited 1"},
		{"a hang", Hung, Plan{Checkpoint: "step-50"}, errors.New("no progress for 1m0s"), "attempt 2 failed; attempt 3 starts in 2s", "no progress for 1m0s"},
		{"a straggler replaced", Replaced,
			Plan{Host: "h1", Spare: "h2", Checkpoint: "step-50", Why: "straggler: rank 2 (worker-2@h1) spends 12x its peers' CPU per step (0.120s against 0.010s)"},
			errors.New("replacing h1 (...) with spare h2 at checkpoint step-50"),
			"replaced straggler host h1 with spare h2 at checkpoint step-50; attempt 3 starts in 2s",
			`straggler replaced (on_straggler = "replace"), not a failure: straggler: rank 2 (worker-2@h1) spends 12x its peers' CPU per step (0.120s against 0.010s)`},
		{"replaced, no checkpoint named", Replaced, Plan{Host: "h1", Spare: "h2"}, nil,
			"replaced straggler host h1 with spare h2; attempt 3 starts in 2s", `straggler replaced (on_straggler = "replace"), not a failure`},
		{"a regrow", Regrow, Plan{Host: "h3", Hosts: 3, Checkpoint: "step-60"}, errors.New("h3 answers again ..."),
			"regrew to 3 hosts at checkpoint step-60, taking h3 back; attempt 3 starts in 2s",
			`regrow (regrow = "checkpoint"), not a failure: h3 answers again and a new checkpoint is complete`},
		{"a regrow without its plan", Regrow, Plan{}, errors.New("h3 answers again"),
			"attempt 2 ended to restart on other hosts (regrown); attempt 3 starts in 2s", "planned (regrown), not a failure: h3 answers again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, root := Restarted(tc.kind, 2, 2*time.Second, tc.plan, tc.err)
			assert.Equal(t, tc.msg, msg)
			assert.Equal(t, tc.root, root)
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Succeeded: "succeeded", Failed: "failed", SetupFailed: "setup failed", HostLost: "host lost",
		Hung: "hung", Interrupted: "interrupted", Fenced: "hosts kept out", Adoptable: "a group to adopt", Regrow: "regrown", Replaced: "straggler replaced", Kind(42): "outcomeKind(42)"} {
		assert.Equal(t, want, k.String())
	}
}

// Progress is a new checkpoint: another name, or the same name with
// other content. A new time on the one resumed from (the same digest)
// is not; where drover has not read both, a later one counts.
func TestAdvanced(t *testing.T) {
	from := Checkpoint{Seq: 3, Name: "step-10", Digest: "d1"}
	for _, tc := range []struct {
		name   string
		newest Checkpoint
		want   bool
	}{
		{"the one resumed from", from, false},
		{"an older one", Checkpoint{Seq: 2, Name: "step-20", Digest: "d2"}, false},
		{"another name", Checkpoint{Seq: 4, Name: "step-20", Digest: "d1"}, true},
		{"touched: same name, same content", Checkpoint{Seq: 4, Name: "step-10", Digest: "d1"}, false},
		{"saved again: same name, other content", Checkpoint{Seq: 4, Name: "step-10", Digest: "d2"}, true},
		{"saved again, content not read", Checkpoint{Seq: 4, Name: "step-10"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Advanced(from, tc.newest))
		})
	}
	assert.True(t, Advanced(Checkpoint{Seq: 3, Name: "step-10"}, Checkpoint{Seq: 4, Name: "step-10", Digest: "d1"}), "the resumed one not read")
}
