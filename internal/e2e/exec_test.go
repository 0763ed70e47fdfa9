package e2e

import (
	"fmt"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// Ctrl-C on `drover exec` stops the command on every host before drover
// exits; closing the SSH channels alone would leave it running there. A
// second Ctrl-C kills what ignores SIGTERM without waiting out the grace.
func TestExecInterrupt(t *testing.T) {
	fleettest.Need(t, fleet)
	for _, tc := range []struct {
		name, trap string
		sig        syscall.Signal
		second     bool
		want       string
	}{
		{"once", "", syscall.SIGINT, false, "exited 143 (SIGTERM)"},
		{"twice", "trap '' TERM; ", syscall.SIGINT, true, "exited 137 (SIGKILL)"},
		// The terminal drover ran in went away.
		{"hangup", "", syscall.SIGHUP, false, "exited 143 (SIGTERM)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := kit.NewFleetJob(t, kit.JobSpec{Script: "true"})
			// One argument: a shell line, with a background child that
			// must not survive either.
			line := fmt.Sprintf(`export DROVER_JOB=%s; %secho "ready $(hostname)"; sleep 1000 & sleep 1001`, j.Name, tc.trap)
			d := kit.StartDroverArgs(t, j, "exec", "--stop-grace", "60s", j.Path, "--", line)
			n := len(fleet.Hosts)
			d.WaitLines(t, regexp.MustCompile(`(?m)^\[`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] ready `+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d$`), n, 60*time.Second)
			require.GreaterOrEqual(t, len(kit.JobProcs(t, j.Name)), 2*n, "both sleeps on every host")
			d.Signal(t, tc.sig)
			if tc.second {
				time.Sleep(500 * time.Millisecond)
				require.GreaterOrEqual(t, len(kit.JobProcs(t, j.Name)), 2*n, "the command ignores SIGTERM")
				d.Signal(t, syscall.SIGINT)
			}
			require.Equal(t, kit.ExitInterrupted, d.Wait(t, 15*time.Second), "drover waits for the hosts, not for the 60s grace")
			stderr := d.Stderr.String()
			assert.Contains(t, stderr, fmt.Sprintf("drover: %v: stopping the command on every host (again to kill at once)\n", tc.sig))
			assert.Contains(t, stderr, fmt.Sprintf("drover exec: %d of %d hosts failed:\n", n, n))
			for i := range n {
				assert.Contains(t, stderr, fmt.Sprintf("  %s: %s\n", fleet.Hosts[i].Name, tc.want))
			}
			kit.WaitNoJobProcs(t, j.Name, 3*time.Second)
		})
	}
}

// --timeout stops the command where it hangs, lets the other hosts answer,
// and exits 124 as timeout(1) does.
func TestExecTimeout(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "true"})
	line := fmt.Sprintf(`export DROVER_JOB=%s; echo "up $(hostname)"; case $(hostname) in `+fleet.Hosts[1].Name+`) sleep 1000 & sleep 1001;; esac`, j.Name)
	d := kit.StartDroverArgs(t, j, "exec", "--timeout", "1s", j.Path, "--", line)
	require.Equal(t, 124, d.Wait(t, 15*time.Second))
	n := len(fleet.Hosts)
	d.WaitLines(t, regexp.MustCompile(`(?m)^\[`+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d\] up `+regexp.QuoteMeta(kit.FleetPrefix())+`-h\d$`), n, time.Second)
	assert.Equal(t, "drover exec: 1 of "+fmt.Sprint(n)+" hosts failed:\n  "+fleet.Hosts[1].Name+": timed out after 1s; stopped with SIGTERM\n", d.Stderr.String())
	kit.WaitNoJobProcs(t, j.Name, 3*time.Second)
}
