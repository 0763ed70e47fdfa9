package sweeprun

import (
	"context"
	"fmt"
	"io"
	"path"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/sweep"
)

// TrialSpec is one trial as the runner asks for it.
type TrialSpec struct {
	Trial   sweep.Trial
	SweepID string
	// Command is the job's command with {NAME} replaced by the trial's values.
	Command []string
	// Env is DROVER_PARAM_<NAME>, DROVER_TRIAL_ID and DROVER_SWEEP_ID,
	// for every process of the trial (launcher.RunOptions.Env).
	Env map[string]string
	// Placement is the host and the GPUs the trial runs on, and nothing else.
	Placement sweep.Placement
	// Out takes the trial's output lines as drover run prints them (a
	// "[worker@host] " prefix is allowed); the runner reads the metrics
	// from them.
	Out io.Writer
}

// RunTrial runs one trial to its end: nil when it succeeded, an error
// saying why it failed otherwise. Cancelling ctx stops it (an early stop
// or Ctrl-C).
type RunTrial func(ctx context.Context, spec TrialSpec) error

// TrialConfig is the Adjust (launcher.RunOptions) that makes the job
// spec's trial: the placement's host alone, with its GPUs pinned, in
// <workdir>/trials/<id> (so its checkpoints, pidfiles and workdir lease
// are its own), named <job>-<id> (its own logs), running the trial's
// command, with no restart for a lost host (the sweep moves the trial
// instead). It is applied at every reading of the job, restarts included.
// The trial's Env is not [job.env]'s, where drover's own DROVER_*
// names are refused: it goes in launcher.RunOptions.Env.
func TrialConfig(spec TrialSpec) func(*config.Config) error {
	return func(cfg *config.Config) error {
		var host *config.Host
		for i := range cfg.Hosts {
			if cfg.Hosts[i].Name == spec.Placement.Host {
				h := cfg.Hosts[i]
				host = &h
			}
		}
		if host == nil {
			return fmt.Errorf("trial %s runs on host %s, which %s no longer names (put it back, or run the sweep again)",
				spec.Trial.ID, spec.Placement.Host, cfg.InventoryPath)
		}
		sub := path.Join("trials", spec.Trial.ID)
		host.Spare = false
		host.MinGPUs = 0
		host.GPUs = config.GPUSpec{List: append([]int(nil), spec.Placement.GPUs...)}
		host.Workdir = path.Join(host.Workdir, sub)
		cfg.Hosts = []config.Host{*host}
		cfg.Job.Name += "-" + spec.Trial.ID
		cfg.Job.Workdir = path.Join(cfg.Job.Workdir, sub)
		cfg.Job.MinGPUs = 0
		// A lost host ends the trial's run at once, and the sweep moves
		// the trial to another host, counting it against the job's
		// max_host_failures itself (sweep.Policy): waiting host_wait
		// for the same host would keep the trial off the others.
		cfg.Job.MaxHostFailures = 0
		cfg.Job.Command = append([]string(nil), spec.Command...)
		return nil
	}
}
