package plan

import (
	"fmt"

	"github.com/droverhq/drover/cluster/config"
)

// maxPort is the highest TCP port.
const maxPort = 65535

// checkPlanned reports, as configuration errors, what the plan shows to
// be impossible before anything runs (issue 21): TensorFlow ports past
// 65535, and a checkpoint_dir at or above a host's workdir or home, which
// the loader cannot see when it depends on the host (a host's own
// workdir, its home directory).
func checkPlanned(cfg *config.Config, p *Plan, homes map[string]string) error {
	var errs config.ConfigErrors
	top := 0
	var worst Process
	for _, pr := range p.Processes {
		if pr.Port > top {
			top, worst = pr.Port, pr
		}
	}
	if top > maxPort {
		over := top - maxPort
		errs = append(errs, &config.ConfigError{File: cfg.Path, Key: "job.base_port",
			Msg: fmt.Sprintf("%s on %s would listen on port %d: tasks on one host take base_port, base_port + 1, ..., and %d is past %d",
				worst.Name(), worst.Host.Name, top, top, maxPort),
			Fix: fmt.Sprintf("write base_port = %d or lower", cfg.Job.BasePort-over)})
	}
	seen := map[string]bool{}
	for _, h := range p.Hosts {
		wd := h.Workdir
		msg := config.CheckpointDirProblem(cfg.Job.CheckpointDir, homes[h.Name], wd)
		if msg == "" || seen[msg] {
			continue
		}
		seen[msg] = true
		errs = append(errs, &config.ConfigError{File: cfg.Path, Key: "job.checkpoint_dir",
			Msg: fmt.Sprintf("on %s: %s", h.Name, msg),
			Fix: `write checkpoint_dir = "checkpoints" (a directory inside the workdir) or an absolute path of its own`})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
