// Package restart is drover run's restart policy: after an attempt of the
// group ended, whether the run tries again, how long it waits first, and
// what the retry costs.
//
// It owns the outcome kinds an attempt ends in (Kind), the budget of
// restarts (max_restarts for the job's failures, max_host_failures for
// the fleet's: lost hosts and hangs), restart_policy with the retry and
// fatal exit-status lists, the backoff between attempts, and the
// crash-loop breaker (max_restarts_without_progress) and the start-up
// failure rule (SameStartFailure). They are values and
// pure functions of the job's configuration and how attempts ended, kept
// apart from the launcher's runner, which runs the attempts, so that
// every rule has a table test that runs no process.
package restart
