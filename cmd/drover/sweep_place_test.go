//go:build !droveragent

package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/sweep"
)

// A trial's run that ended on GPUs another run leased, or on a lost
// host, is a setback the sweep requeues; any other failure is the trial's.
func TestTrialSetback(t *testing.T) {
	p := sweep.On("h1", 0)
	busy := &gpulease.BusyError{Host: "h1", Want: 1}
	lost := &restart.EndError{Outcome: restart.Outcome{Kind: restart.HostLost, Err: errors.New("h1 lost: no heartbeat")},
		Why: "no restarts left for lost hosts and hangs (max_host_failures = 0)"}
	failed := &restart.EndError{Outcome: restart.Outcome{Kind: restart.Failed, Err: errors.New("exit status 1")}, Why: "no restarts left"}
	for _, tc := range []struct {
		name string
		err  error
		want sweep.Setback // 0: no setback
	}{
		{"GPUs leased", fmt.Errorf("run: %w (logs: x)", &restart.EndError{Outcome: restart.Outcome{Kind: restart.SetupFailed, Err: fmt.Errorf("lease: %w", busy)}}), sweep.LeaseConflict},
		{"host lost", fmt.Errorf("%w (logs: x)", lost), sweep.HostLost},
		{"host never answered", fmt.Errorf("connect: %w", cluster.ErrConnectionLost), sweep.HostLost},
		{"the trainer failed", fmt.Errorf("%w (logs: x)", failed), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := trialSetback(tc.err, p)
			var sb *sweep.SetbackError
			if tc.want == 0 {
				assert.False(t, errors.As(got, &sb))
				assert.Equal(t, tc.err, got)
				return
			}
			if assert.ErrorAs(t, got, &sb) {
				assert.Equal(t, tc.want, sb.Setback)
				assert.Equal(t, "h1", sb.Host)
				assert.ErrorIs(t, got, tc.err)
				// The trial's run's own verdict on restarts is not the
				// sweep's, which moves the trial by the job's.
				assert.NotContains(t, got.Error(), "max_host_failures")
				assert.NotContains(t, got.Error(), "no restarts left")
			}
		})
	}
}
