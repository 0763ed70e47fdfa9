//go:build !droveragent

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/fanout"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/sweep"
)

// sweepLook is the job's hosts' GPUs as drover probe shows them (spares
// too: a sweep has no group to keep spares for): fleet is every GPU a
// trial may take, leased by another run or not, free those no run
// leases. A host that does not answer is left out, and said so on say.
func sweepLook(ctx context.Context, c *cli.Context, cfg *config.Config, bin string, say io.Writer) (fleet, free []sweep.HostGPUs) {
	for _, r := range fanout.Probe(ctx, cfg.Job, cfg.Hosts, dialOptions(c, cfg.Hosts), bin) {
		if r.Err != nil {
			fmt.Fprintf(say, "drover: %s: left out of the sweep: %v\n", r.Report.Host, r.Err)
			continue
		}
		all := slices.Clone(r.Selection.Indices)
		for _, s := range r.Selection.Skipped {
			if s.Why == "leased" {
				all = append(all, s.Index)
			}
		}
		slices.Sort(all)
		if len(all) > 0 {
			fleet = append(fleet, sweep.HostGPUs{Host: r.Selection.Host, GPUs: all})
			free = append(free, sweep.HostGPUs{Host: r.Selection.Host, GPUs: r.Selection.Indices})
		}
	}
	return fleet, free
}

// trialSetback is err, the end of a trial's run on p, as a
// *sweep.SetbackError when the run gave its placement back rather than
// failed: GPUs another run leased between the sweep's look and the
// trial's start (the lease step's *gpulease.BusyError), or a lost host
// (the run's last attempt ended with its host lost, or the host never
// answered).
func trialSetback(err error, p sweep.Placement) error {
	var be *gpulease.BusyError
	if errors.As(err, &be) {
		return &sweep.SetbackError{Setback: sweep.LeaseConflict, Host: cmp.Or(be.Host, p.Host()), Err: err}
	}
	var ee *restart.EndError
	if errors.As(err, &ee) && ee.Outcome.Kind == restart.HostLost || cluster.IsUnreachable(err) {
		// Which host of a group was lost the error says only in words:
		// the sweep looks at the hosts to find it (sweep.Missing).
		host := ""
		if len(p.Hosts) == 1 {
			host = p.Host()
		}
		sb := &sweep.SetbackError{Setback: sweep.HostLost, Host: host, Err: err}
		if ee != nil && ee.Why != "" {
			// The run's verdict on its own restarts ("no restarts left
			// ... (max_host_failures = 0)", the trial's setting, see
			// sweeprun.TrialConfig) is not the sweep's: it moves the
			// trial by the job's, and says so itself.
			sb.Cause = strings.Replace(err.Error(), "; "+ee.Why, "", 1)
		}
		return sb
	}
	return err
}
