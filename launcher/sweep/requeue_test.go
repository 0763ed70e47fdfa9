package sweep

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequeue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      Policy
		s      Setback
		before int
		want   Decision
	}{
		{"a lease conflict waits", Policy{MaxHostFailures: 0}, LeaseConflict, 0, Decision{Requeue: true, Block: true}},
		{"a lease conflict waits even under never", Policy{Never: true}, LeaseConflict, 5, Decision{Requeue: true, Block: true}},
		{"a lost host moves the trial", Policy{MaxHostFailures: 2}, HostLost, 0, Decision{Requeue: true, MarkOut: true,
			Why: "the trial moves to another host (moves left after this one: 1 of the job's max_host_failures = 2)"}},
		{"the last host failure allowed", Policy{MaxHostFailures: 2}, HostLost, 1, Decision{Requeue: true, MarkOut: true,
			Why: "the trial moves to another host (moves left after this one: 0 of the job's max_host_failures = 2)"}},
		{"past max_host_failures", Policy{MaxHostFailures: 2}, HostLost, 2,
			Decision{MarkOut: true, Why: "not moving the trial to another host: it lost 3 (max_host_failures = 2)"}},
		{"never", Policy{Never: true, MaxHostFailures: 3}, HostLost, 0,
			Decision{MarkOut: true, Why: `not moving the trial to another host: restart_policy = "never"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.p.Requeue(tc.s, tc.before))
		})
	}
}
