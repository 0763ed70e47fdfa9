package slurm

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// ScriptInput is what the sbatch script of a job is made of.
type ScriptInput struct {
	Config *config.Config
	// Drover is the absolute path of the drover binary the allocation
	// runs; it must be reachable at that path on the nodes.
	Drover string
	// Flags are drover submit's --partition, --time, --nodes and
	// --gpus-per-node; set fields win over the job file's [slurm] table.
	Flags config.Slurm
}

// ScriptError says why a job cannot be written as an sbatch script.
type ScriptError struct {
	What, Value, Fix string
}

func (e *ScriptError) Error() string {
	return fmt.Sprintf("write sbatch script: %s %q cannot stand in an #SBATCH line: %s", e.What, e.Value, e.Fix)
}

// SbatchOptions merges the job file's [slurm] table with the flags: a flag that is
// set wins. Nodes default to the job's own hosts (not spares), else 1.
func SbatchOptions(cfg *config.Config, flags config.Slurm) config.Slurm {
	s := cfg.Slurm
	if flags.Partition != "" {
		s.Partition = flags.Partition
	}
	if flags.Time != "" {
		s.Time = flags.Time
	}
	if flags.Nodes > 0 {
		s.Nodes = flags.Nodes
	}
	if flags.GPUsPerNode > 0 {
		s.GPUsPerNode = flags.GPUsPerNode
	}
	if s.Nodes == 0 {
		for _, h := range cfg.Hosts {
			if !h.Spare && !cfg.FromAllocation {
				s.Nodes++
			}
		}
	}
	if s.Nodes == 0 {
		s.Nodes = 1
	}
	return s
}

// Script is the sbatch script that runs the job inside its allocation:
// `drover run --inventory slurm JOB.toml`, so the job file runs unchanged
// on the allocation's nodes whatever hosts it names for a hand-run fleet.
// drover is exec'd, so the signals Slurm sends at scancel or at the time
// limit reach it directly and it stops every step it started.
func Script(in ScriptInput) (string, error) {
	cfg := in.Config
	s := SbatchOptions(cfg, in.Flags)
	dir := filepath.Dir(cfg.Path)
	if err := safe("job directory", dir, "move the job file to a directory whose path has no spaces, quotes or shell characters"); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/bash\n")
	fmt.Fprintf(&b, "# Written by drover submit for job %s (%s).\n", cfg.Job.Name, cfg.Path)
	fmt.Fprintf(&b, "# drover runs inside the allocation: every process is a job step (srun --overlap)\n")
	fmt.Fprintf(&b, "# on its node, supervised and restarted from the newest checkpoint; scancel\n")
	fmt.Fprintf(&b, "# stops them all.\n")
	opt := func(name, value string) error {
		if value == "" {
			return nil
		}
		if err := safe("--"+name, value, "check the [slurm] table and the flags of drover submit"); err != nil {
			return err
		}
		fmt.Fprintf(&b, "#SBATCH --%s=%s\n", name, value)
		return nil
	}
	count := func(n int) string {
		if n <= 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	for _, o := range [][2]string{
		{"job-name", cfg.Job.Name},
		{"nodes", count(s.Nodes)},
		{"ntasks-per-node", "1"},
		{"partition", s.Partition},
		{"time", s.Time},
		{"gpus-per-node", count(s.GPUsPerNode)},
		{"cpus-per-task", count(s.CPUsPerTask)},
		{"account", s.Account},
		{"qos", s.QOS},
		{"constraint", s.Constraint},
		{"chdir", dir},
		{"output", filepath.Join(dir, "slurm-%x-%j.out")},
	} {
		if err := opt(o[0], o[1]); err != nil {
			return "", err
		}
	}
	if s.Requeue {
		b.WriteString("#SBATCH --requeue\n")
	} else {
		b.WriteString("#SBATCH --no-requeue\n")
	}
	for _, a := range s.ExtraArgs {
		if err := safe("extra argument", a, "check extra_args in the [slurm] table"); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "#SBATCH %s\n", a)
	}
	fmt.Fprintf(&b, "exec %s run --inventory slurm %s\n", cluster.ShellQuote(in.Drover), cluster.ShellQuote(cfg.Path))
	return b.String(), nil
}

// safe refuses what sbatch would read differently from how it is written.
func safe(what, v, fix string) error {
	if strings.IndexFunc(v, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("'\"`$\\;#", r)
	}) >= 0 {
		return &ScriptError{What: what, Value: v, Fix: fix}
	}
	return nil
}
