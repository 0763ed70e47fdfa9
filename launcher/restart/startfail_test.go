package restart

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

func TestSameStartFailure(t *testing.T) {
	const noFile = "python3: can't open file '/home/u/drover/mnist/trainn.py': [Errno 2] No such file or directory"
	keyErr := func(rank string) string {
		return "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n    lr = cfg[\"lr\"]\nKeyError: 'lr' (rank " + rank + ")\n"
	}
	job := config.Job{MaxRestarts: 18, RestartPolicy: config.RestartOnFailure}
	for _, tc := range []struct {
		name       string
		job        config.Job
		ends       []End
		progressed bool
		// stop: the run stops; want is in its message.
		stop bool
		want []string
	}{
		{"a misspelled script on every rank", job,
			[]End{{Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}}, false,
			true, []string{"every process (4) of the first attempt failed the same way at start", "exit status 2", "trainn.py",
				"max_restarts = 18", `restart_policy = "on-failure"`, "add 2 to retry_exit_codes"}},
		{"the same traceback but for rank numbers", job,
			[]End{{Code: 1, Tail: keyErr("0")}, {Code: 1, Tail: keyErr("1")}}, false,
			true, []string{"every process (2)", `KeyError: 'lr' (rank 0)`}},
		{"half failed alike, drover stopped the rest", job,
			[]End{{Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}, {Code: 143, AfterStop: true}, {Code: 143, AfterStop: true}}, false, false, nil},
		{"failed alike, some after the stop began", job,
			[]End{{Code: 2, Tail: noFile}, {Code: 2, Tail: noFile, AfterStop: true}, {Code: 2, Tail: noFile, AfterStop: true}}, false,
			true, []string{"every process (3)"}},
		{"one rank failed, the others were stopped", job,
			[]End{{Code: 1, Tail: keyErr("3")}, {Code: 143, AfterStop: true}, {Code: 143, AfterStop: true}}, false, false, nil},
		{"after progress", job,
			[]End{{Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}}, true, false, nil},
		{"different exit statuses", job,
			[]End{{Code: 2, Tail: noFile}, {Code: 1, Tail: noFile}}, false, false, nil},
		{"different last lines", job,
			[]End{{Code: 1, Tail: keyErr("0")}, {Code: 1, Tail: "RuntimeError: CUDA out of memory"}}, false, false, nil},
		{"killed by a signal", job,
			[]End{{Code: 137, Tail: "x"}, {Code: 137, Tail: "x"}}, false, false, nil},
		{"a lost host", job,
			[]End{{Code: -1}, {Code: -1}}, false, false, nil},
		{"no stderr to compare", job,
			[]End{{Code: 1}, {Code: 1}}, false, false, nil},
		{"one rank succeeded", job,
			[]End{{Code: 0}, {Code: 1, Tail: keyErr("1")}, {Code: 1, Tail: keyErr("2")}}, false, false, nil},
		{"a status the job retries anyway", config.Job{MaxRestarts: 3, RetryExitCodes: []int{2}},
			[]End{{Code: 2, Tail: noFile}, {Code: 2, Tail: noFile}}, false, false, nil},
		{"no restarts to spare anyway", config.Job{},
			[]End{{Code: 2, Tail: noFile}}, false, false, nil},
		{"the default policy named", config.Job{MaxRestarts: 3},
			[]End{{Code: 2, Tail: noFile}}, false, true, []string{`restart_policy = "on-failure"`, "every process (1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SameStartFailure(tc.job, tc.ends, tc.progressed)
			if !tc.stop {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
