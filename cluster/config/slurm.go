package config

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// InventorySlurm is the inventory value that takes the hosts from the Slurm
// allocation drover runs in: `inventory = "slurm"`.
const InventorySlurm = "slurm"

// TransportSlurm starts processes as Slurm job steps (srun) inside the
// allocation; hosts taken from an allocation have it.
const TransportSlurm = "slurm"

// Slurm is the job file's [slurm] table: the sbatch options `drover submit`
// asks for, so a job is submitted the same way every time. Flags of drover
// submit override them. Empty or zero means "not set": Slurm's own default
// (or the cluster's) applies.
type Slurm struct {
	Partition   string
	Time        string // sbatch --time, e.g. "2:00:00" or "1-00:00:00"
	Nodes       int
	GPUsPerNode int
	CPUsPerTask int
	Account     string
	QOS         string
	Constraint  string
	// Requeue lets Slurm requeue the job (node failure, preemption); the
	// requeued job resumes from the newest checkpoint and its restart
	// count continues from SLURM_RESTART_COUNT.
	Requeue bool
	// ExtraArgs are further sbatch options ("--exclusive", "--mem=0"), one
	// #SBATCH line each.
	ExtraArgs []string
}

var slurmFields = []field{
	{"partition", `partition = "gpu"`},
	{"time", `time = "4:00:00"`},
	{"nodes", `nodes = 2`},
	{"gpus_per_node", `gpus_per_node = 8`},
	{"cpus_per_task", `cpus_per_task = 8`},
	{"account", `account = "ml-team"`},
	{"qos", `qos = "normal"`},
	{"constraint", `constraint = "a100"`},
	{"requeue", `requeue = true`},
	{"extra_args", `extra_args = ["--exclusive"]`},
}

var slurmSchema = tableSchema{"[slurm]", slurmFields}

// slurmReader reads the [slurm] table: the sbatch options drover submit
// asks for, each refused unless it can stand on an #SBATCH line as
// written. Hosts taken from an allocation are inventoryReader's.
type slurmReader struct{ *walker }

// slurm reads the [slurm] table. Every value lands on an #SBATCH line of a
// shell script, so whitespace, quotes and shell characters are refused
// rather than quoted: Slurm names never contain them.
func (w slurmReader) slurm(top tbl) Slurm {
	var s Slurm
	t, ok := w.table(top, "slurm", slurmSchema)
	if !ok {
		return s
	}
	w.unknown(t)
	for _, f := range []struct {
		name string
		dst  *string
	}{{"partition", &s.Partition}, {"time", &s.Time}, {"account", &s.Account}, {"qos", &s.QOS}, {"constraint", &s.Constraint}} {
		if v, ok := w.str(t, f.name); ok && w.sbatchValue(t, f.name, v) {
			*f.dst = v
		}
	}
	if s.Time != "" && strings.Trim(s.Time, "0123456789:-") != "" {
		w.add(t.key("time"), fmt.Sprintf("%q is not a Slurm time limit", s.Time),
			`write minutes, "H:MM:SS" or "D-HH:MM:SS": `+slurmSchema.example("time"))
		s.Time = ""
	}
	if n, ok := w.integer(t, "nodes", 1, 1<<20, "1 or more"); ok {
		s.Nodes = n
	}
	if n, ok := w.count(t, "gpus_per_node"); ok {
		s.GPUsPerNode = n
	}
	if n, ok := w.count(t, "cpus_per_task"); ok {
		s.CPUsPerTask = n
	}
	if b, ok := w.boolean(t, "requeue"); ok {
		s.Requeue = b
	}
	if args, ok := w.strList(t, "extra_args"); ok {
		for _, a := range args {
			if !strings.HasPrefix(a, "--") || !w.sbatchValue(t, "extra_args", a) {
				if !strings.HasPrefix(a, "--") {
					w.add(t.key("extra_args"), fmt.Sprintf("%q is not an sbatch option", a),
						`write long options with their value after "=": `+slurmSchema.example("extra_args"))
				}
				continue
			}
			s.ExtraArgs = append(s.ExtraArgs, a)
		}
	}
	return s
}

// sbatchValue reports whether v can stand on an #SBATCH line as written.
func (w slurmReader) sbatchValue(t tbl, name, v string) bool {
	bad := strings.IndexFunc(v, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("'\"`$\\;#", r)
	})
	if v == "" || bad >= 0 {
		w.add(t.key(name), fmt.Sprintf("%q cannot be passed to sbatch (empty, or has whitespace, quotes or shell characters)", v),
			"write the value Slurm knows, e.g. "+slurmSchema.example(name))
		return false
	}
	return true
}

// allocationHosts decides the hosts of a job whose file names no hosts of
// its own: those of the allocation drover runs in (opts.Allocation), none
// when the job is being submitted (opts.Submit), else an error at key.
func (w inventoryReader) allocationHosts(opts LoadOptions, key, why string) []Host {
	switch {
	case opts.Allocation != nil:
		return slices.Clone(opts.Allocation) // Load fills in defaults

	case opts.Submit:
		return nil
	}
	w.add(key, why+", but drover is not running inside a Slurm allocation (SLURM_JOB_ID is not set)",
		"submit the job with `drover submit JOB.toml`, or run drover run inside salloc or an sbatch script")
	return nil
}

// slurmInventory checks a job file with inventory = "slurm" and returns the
// allocation's hosts.
func (w inventoryReader) slurmInventory(doc map[string]any, opts LoadOptions) []Host {
	if _, has := doc["host"]; has {
		w.add("inventory", `the job file has both inventory = "slurm" and [[host]] tables`,
			`the hosts come from the Slurm allocation: remove the [[host]] tables, or the inventory line`)
	}
	if _, has := doc["ssh"]; has {
		w.add("ssh", `[ssh] has no use with inventory = "slurm": processes start with srun, not over SSH`,
			"remove the [ssh] table")
	}
	return w.allocationHosts(opts, "inventory", `inventory = "slurm" takes the hosts from the allocation`)
}
