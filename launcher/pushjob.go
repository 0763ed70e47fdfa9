package launcher

import (
	"errors"
	"fmt"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/launcher/setup"
)

// pushJob is what push.ForJob needs of the job file. The conversion lives
// here, at the boundary, so package push does not read the job file.
func pushJob(cfg *config.Config) push.Job {
	j := push.Job{File: cfg.Path, Code: cfg.Job.Code, Workdir: cfg.Job.Workdir,
		CheckpointDir: cfg.Job.CheckpointDir, Exclude: cfg.Job.Exclude, Protect: setup.Protect(cfg)}
	for _, d := range cfg.Data {
		j.DataDests = append(j.DataDests, d.Dest)
	}
	return j
}

// scanLocal is push.ScanLocal with a bad exclude pattern made the job
// file's *config.ConfigError: a mistake in what the user wrote, so the CLI
// exits 2 naming the file and line (or key), and a run does not retry it.
func scanLocal(code string, opts push.Options) (*push.Tree, error) {
	tree, err := push.ScanLocal(code, opts)
	var pe *push.PatternError
	if errors.As(err, &pe) {
		return nil, &config.ConfigError{File: pe.File, Line: pe.Line, Key: pe.Key,
			Msg: fmt.Sprintf("bad pattern %q", pe.Pattern), Fix: pe.Fix}
	}
	return tree, err
}
