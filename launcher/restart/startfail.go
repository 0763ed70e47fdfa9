package restart

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// The start-up failure rule: a misspelled script, a missing module or a
// KeyError on a config key fails every rank the same way within moments
// of its start, and every restart repeats it (torchrun's default is no
// restart at all). When the first attempt of a run ends like that before
// any progress, restarting max_restarts times only prints the same
// traceback that many times more, so the run stops after one attempt and
// says why. A single rank failing while the others run, a signal (the
// OOM killer), a lost host, or any progress (a checkpoint, a progress
// report) lets the restarts go on as before.

// End is one process's end in an attempt, as the start-up failure rule
// sees it.
type End struct {
	// Code is its exit status: 0 it succeeded, -1 none (a lost host).
	Code int
	// Tail is the end of its stderr (or the cause drover read for it).
	Tail string
	// AfterStop says it ended after drover had begun to stop the group:
	// by a signal (or a lost channel) it is the stop's victim; with a
	// status of 1-127 it failed on its own all the same (the stop's
	// SIGTERM would have given 143).
	AfterStop bool
}

// own reports whether e is a failure of its own, not the stop's victim.
func (e End) own() bool { return !e.AfterStop || (e.Code >= 1 && e.Code <= 127) }

// digits are what "the same way" ignores of a failure's last line: rank
// numbers, ports, pids and line numbers differ between ranks failing alike.
var digits = regexp.MustCompile(`[0-9]+`)

// signature is how a failure's tail compares with another's: its last
// non-empty line, digits aside.
func signature(tail string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	return digits.ReplaceAllString(strings.TrimSpace(lines[len(lines)-1]), "N")
}

// SameStartFailure applies the start-up failure rule to the ends of a
// run's first attempt, which progressed or not (a new checkpoint, a
// progress report): it returns why the run stops without a restart (for
// "...; not restarting: <why>"), or nil. The rule holds when at least half of the processes failed on their
// own (the others were stopped by drover before they got to fail), every
// one of them with the same exit status in 1-127 and the same last line
// of stderr (digits aside), and nothing progressed. A status the job lists
// in retry_exit_codes is retried anyway, as everywhere.
func SameStartFailure(job config.Job, ends []End, progressed bool) error {
	if progressed || len(ends) == 0 || job.RestartPolicy == config.RestartNever || job.MaxRestarts == 0 {
		return nil
	}
	first := ends[0]
	sig := signature(first.Tail)
	if first.Code < 1 || first.Code > 127 || sig == "" || slices.Contains(job.RetryExitCodes, first.Code) {
		return nil
	}
	for _, e := range ends {
		if !e.own() || e.Code != first.Code || signature(e.Tail) != sig {
			return nil
		}
	}
	last := strings.Split(strings.TrimSpace(first.Tail), "\n")
	return fmt.Errorf("every process (%d) of the first attempt failed the same way at start, before any progress (exit status %d, %q): "+
		"another attempt would fail alike, so drover stops instead of spending max_restarts = %d "+
		"(restart_policy = %q; fix the error, or to retry anyway add %d to retry_exit_codes)",
		len(ends), first.Code, strings.TrimSpace(last[len(last)-1]), job.MaxRestarts, policyName(job), first.Code)
}

func policyName(job config.Job) config.RestartPolicy {
	if job.RestartPolicy == "" {
		return config.RestartOnFailure
	}
	return job.RestartPolicy
}
