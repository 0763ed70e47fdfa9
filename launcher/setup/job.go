package setup

import (
	"context"
	"fmt"
	"maps"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/hostio"
)

// ForJob is the setup options of cfg's job; the caller adds Force, Out,
// LogDir and Note.
func ForJob(cfg *config.Config) Options {
	return Options{Lines: cfg.Job.Setup, Keys: cfg.Job.SetupKey, Timeout: cfg.Job.SetupTimeout}
}

// Protect are the paths, relative to the workdir, that a push of cfg's job
// never sends, overwrites or deletes for its setup's sake: .venv, where
// uv, `python3 -m venv .venv` and most guides put the environment. A
// push deletes only what it pushed, so what setup makes elsewhere survives
// too; .venv is protected because the code directory often holds a local
// one (uv makes it there), which a push would otherwise send over the
// host's.
func Protect(cfg *config.Config) []string {
	if len(cfg.Job.Setup) == 0 {
		return nil
	}
	return []string{VenvDir}
}

// VenvDir is the environment directory a push leaves alone (Protect).
const VenvDir = ".venv"

// HostEnv is the environment setup runs with on h: [job.env], then
// [host.env] over it, as the processes get them.
func HostEnv(cfg *config.Config, h config.Host) map[string]string {
	env := maps.Clone(cfg.Job.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, h.Env)
	return env
}

// RunJob is `drover setup`: it dials hosts, runs Run over the connections
// and closes them. The workdirs must hold the code already (drover push or
// a run before).
func RunJob(ctx context.Context, cfg *config.Config, hosts []config.Host, dial cluster.DialOptions, opts Options) ([]Result, error) {
	ts, errs := cluster.DialAll(ctx, config.Endpoints(hosts), dial)
	defer func() {
		for _, t := range ts {
			if t != nil {
				t.Close()
			}
		}
	}()
	var hs []Host
	for i, h := range hosts {
		if errs[i] != nil {
			return nil, fmt.Errorf("connect to %s: %w", hostio.Label(h), errs[i])
		}
		fsys, err := ts[i].FS(ctx)
		if err != nil {
			return nil, fmt.Errorf("open file access on %s: %w", hostio.Label(h), err)
		}
		home, err := fsys.Home()
		if err != nil {
			return nil, fmt.Errorf("find the home directory on %s: %w", hostio.Label(h), err)
		}
		hs = append(hs, Host{Name: h.Name, T: ts[i], FS: fsys, Workdir: hostio.Abs(home, h.Workdir), Env: HostEnv(cfg, h)})
	}
	return Run(ctx, hs, opts)
}
