package sweeprun

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/droverhq/drover/cluster"
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
// spec's trial: the placement's hosts alone (one, or a group of
// --hosts-per-trial), each with its GPUs pinned, in <workdir>/trials/<id>
// (so its checkpoints, pidfiles and workdir lease are its own), named
// <job>-<id> (its own logs), running the trial's command, with no
// restart for a lost host and no smaller group without it (the sweep
// moves the trial instead). It is applied at every reading of the job,
// restarts included. The trial's Env is not [job.env]'s, where drover's
// own DROVER_* names are refused: it goes in launcher.RunOptions.Env.
func TrialConfig(spec TrialSpec) func(*config.Config) error {
	return func(cfg *config.Config) error {
		sub := TrialDir(spec.Trial.ID)
		var hosts []config.Host
		for _, p := range spec.Placement.Hosts {
			i := slices.IndexFunc(cfg.Hosts, func(h config.Host) bool { return h.Name == p.Host })
			if i < 0 {
				return fmt.Errorf("trial %s runs on host %s, which %s no longer names (put it back, or run the sweep again)",
					spec.Trial.ID, p.Host, cfg.InventoryPath)
			}
			h := cfg.Hosts[i]
			h.Spare = false
			h.MinGPUs = 0
			h.GPUs = config.GPUSpec{List: append([]int(nil), p.GPUs...)}
			h.Workdir = path.Join(h.Workdir, sub)
			hosts = append(hosts, h)
		}
		cfg.Hosts = hosts
		cfg.Job.Name += "-" + spec.Trial.ID
		cfg.Job.Workdir = path.Join(cfg.Job.Workdir, sub)
		cfg.Job.MinGPUs = 0
		// A lost host ends the trial's run at once, and the sweep moves
		// the trial to other hosts, counting it against the job's
		// max_host_failures itself (sweep.Policy): waiting host_wait
		// for the same host, or going on without it, would keep the
		// trial off the others or change its shape.
		cfg.Job.MaxHostFailures = 0
		cfg.Job.MinHosts = 0
		cfg.Job.Command = append([]string(nil), spec.Command...)
		return nil
	}
}

// TrialDir is where trial id runs, under the job's workdir on its host.
func TrialDir(id string) string { return path.Join("trials", id) }

// CodeDir is where the sweep pushes the code once per host, under the
// job's workdir: beside the trials' directories ("code" is no trial id).
func CodeDir() string { return path.Join("trials", "code") }

// SeedCommand is the shell line that fills the trial directory trial,
// when it does not exist yet, with hard links to the files of code (the
// sweep's one push to the host) and a copy of the push's own state
// (.drover, which a later push rewrites, so it must not be shared), so
// that the trial's run finds its code already there and its push sends
// nothing. The links share the files' contents: a push replaces a file
// by renaming a new one into place, never writing into it, so no trial's
// push changes another's code. Without hard links (a host whose cp has
// no -l, or code on another filesystem) it leaves nothing behind, and the
// trial's push sends the code as before.
func SeedCommand(code, trial string) string {
	q := cluster.ShellQuote
	tmp := trial + ".seed"
	return fmt.Sprintf("[ -e %[2]s ] || { rm -rf %[3]s && mkdir -p %[4]s && cp -al %[1]s %[3]s && rm -rf %[3]s/.drover && "+
		"{ [ ! -d %[1]s/.drover ] || cp -a %[1]s/.drover %[3]s/.drover; } && mv %[3]s %[2]s; } || { rm -rf %[3]s; exit 3; }",
		q(code), q(trial), q(tmp), q(path.Dir(trial)))
}
