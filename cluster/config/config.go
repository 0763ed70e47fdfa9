package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Defaults applied by Load to keys a job file leaves out.
const (
	DefaultCheckpointDir    = "checkpoints"
	DefaultCheckpointCopies = 2
	// DefaultShardedMarker is checkpoint_marker for checkpoint_layout =
	// "sharded": the file torch.distributed.checkpoint's coordinator writes
	// last, once every rank's shard is written.
	DefaultShardedMarker     = ".metadata"
	DefaultCheckpointKeep    = 2
	DefaultMaxRestarts       = 3
	DefaultProcsPerHost      = 1
	DefaultMasterPort        = 29500
	DefaultBasePort          = 2222
	DefaultSuccessPolicy     = SuccessAllWorkers
	DefaultRestartPolicy     = RestartOnFailure
	DefaultRestartBackoff    = time.Second
	DefaultRestartBackoffMax = 30 * time.Second
	DefaultStopGrace         = 10 * time.Second
	DefaultHostWait          = 5 * time.Minute
	// DefaultHostFailuresPerRestart: max_host_failures defaults to this
	// many times max_restarts.
	DefaultHostFailuresPerRestart = 3
	DefaultGPUMaxUsedMiB          = 100
	// DefaultMaxRestartsWithoutProgress: see Job.MaxRestartsWithoutProgress.
	DefaultMaxRestartsWithoutProgress = 3
	DefaultHealth                     = HealthEnforce
)

// DefaultIgnoreXIDs are the Xids NVIDIA documents as caused by the
// application or the user rather than the GPU (13 graphics engine
// exception, 31 MMU fault, 43 GPU stopped processing, 45 preemptive
// cleanup, 68 video processor exception, 109 context switch timeout): a
// job's own bug raises them, and fencing a sound GPU for it would shrink
// the fleet for nothing.
var DefaultIgnoreXIDs = []int{13, 31, 43, 45, 68, 109}

// LoadOptions changes where Load takes things from.
type LoadOptions struct {
	// InventoryPath, when set (the --inventory flag), replaces the hosts of
	// the job file: its [ssh] and [[host]] tables are used instead of the
	// job file's own (or of the file its inventory key names), so one job
	// runs unchanged on another fleet. Relative to the working directory.
	// InventorySlurm ("slurm") means the Slurm allocation's nodes (see
	// Allocation); a file of that name is "./slurm".
	InventoryPath string
	// HostsOnly accepts a file without a [job] table (an inventory on its
	// own) for commands that only reach the hosts: drover exec and probe.
	// A [job] table that is present is still checked.
	HostsOnly bool
	// Allocation, when drover runs inside a Slurm allocation, holds its
	// hosts (slurm.Allocation.Hosts): they are the job's hosts when the
	// job file says inventory = "slurm" or names no hosts at all.
	Allocation []Host
	// Submit loads a job for drover submit (or plan --format sbatch): its
	// hosts come from an allocation not made yet, so a job file with
	// inventory = "slurm" or without hosts is complete without them.
	Submit bool
}

// Load reads the job file at jobPath, and the inventory holding its hosts,
// applies defaults and validates everything.
//
// Every problem found is returned at once, as ConfigErrors (each a
// *ConfigError with file, line, key and a fix), so that a user corrects a
// file in one pass; IsConfigError is true for every error Load returns.
// Load touches nothing but the files it reads and a stat of the code
// directory, so drover calls it again before each restart to pick up
// edited addresses.
func Load(jobPath string, opts LoadOptions) (*Config, error) {
	return load(jobPath, opts, os.ReadFile)
}

// readFunc reads a file; tests and the fuzzer substitute their own.
type readFunc func(path string) ([]byte, error)

func load(jobPath string, opts LoadOptions, read readFunc) (*Config, error) {
	jobAbs, err := filepath.Abs(jobPath)
	if err != nil {
		return nil, ConfigErrors{{File: jobPath, Msg: fmt.Sprintf("resolve job file path: %v", err)}}
	}
	data, err := read(jobAbs)
	if err != nil {
		return nil, ConfigErrors{{File: jobPath, Msg: fmt.Sprintf("read job file: %v", err),
			Fix: "check the path of the job file"}}
	}
	doc, lines, perr := parseTOML(jobPath, data)
	if perr != nil {
		return nil, ConfigErrors{perr}
	}

	var errs ConfigErrors
	w := &walker{file: jobPath, lines: lines, errs: &errs, top: doc}
	top := tbl{m: doc, schema: topSchema}
	w.unknown(top)
	cfg := &Config{Path: jobAbs}
	if _, hasJob := doc["job"]; opts.HostsOnly && !hasJob {
		// An inventory file on its own: drover exec and probe need no job.
		cfg.Job = Job{Framework: PyTorch, GPUMaxUsedMiB: DefaultGPUMaxUsedMiB, ProcsPerHost: DefaultProcsPerHost}
	} else {
		cfg.Job = w.job(top, filepath.Dir(jobAbs))
	}
	cfg.Slurm = w.slurm(top)

	// Find the file that holds the hosts.
	var hw *walker
	var htop tbl
	var hostsAbs string
	switch {
	case opts.InventoryPath == InventorySlurm:
		// --inventory slurm: the same job file, on the allocation's nodes.
		cfg.FromAllocation, cfg.InventoryPath = true, jobAbs
		cfg.Hosts = w.allocationHosts(opts, "", "--inventory slurm takes the hosts from the allocation")
	case opts.InventoryPath != "":
		hostsAbs, err = filepath.Abs(opts.InventoryPath)
		if err != nil {
			errs = append(errs, &ConfigError{File: opts.InventoryPath, Msg: fmt.Sprintf("resolve inventory path: %v", err)})
			break
		}
		hw, htop = loadInventory(opts.InventoryPath, hostsAbs, read, &errs, func(msg string) *ConfigError {
			return &ConfigError{File: opts.InventoryPath, Msg: msg, Fix: "check the path given to --inventory"}
		})
	case doc["inventory"] == InventorySlurm:
		cfg.FromAllocation, cfg.InventoryPath = true, jobAbs
		cfg.Hosts = w.slurmInventory(doc, opts)
	case doc["inventory"] == nil && doc["host"] == nil && (opts.Allocation != nil || opts.Submit):
		cfg.FromAllocation, cfg.InventoryPath = true, jobAbs
		cfg.Hosts = slices.Clone(opts.Allocation)
	case doc["inventory"] != nil:
		hw, htop, hostsAbs = w.namedInventory(top, jobPath, jobAbs, read)
	default:
		hw, htop, hostsAbs = w, top, jobAbs
	}
	if hw != nil {
		cfg.InventoryPath = hostsAbs
		cfg.Hosts = hw.hosts(htop, filepath.Dir(hostsAbs), cfg.Job.Framework)
	}
	for i := range cfg.Hosts {
		if cfg.Hosts[i].Workdir == "" {
			cfg.Hosts[i].Workdir = cfg.Job.Workdir
		}
	}

	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return cfg, nil
}

// namedInventory loads the inventory file the job file names (inventory =
// "fleet.toml"), relative to the job file, and reports a job file that
// also holds hosts or [ssh] of its own.
func (w *walker) namedInventory(top tbl, jobPath, jobAbs string, read readFunc) (*walker, tbl, string) {
	doc := top.m
	inv, ok := w.str(top, "inventory")
	if !ok {
		return nil, tbl{}, ""
	}
	if _, has := doc["host"]; has {
		w.add("inventory", "the job file has both inventory and [[host]] tables",
			fmt.Sprintf("keep the hosts in one place: move the [[host]] tables into %s, or remove the inventory line", inv))
	}
	if _, has := doc["ssh"]; has {
		w.add("ssh", "[ssh] must be in the inventory file, next to the hosts it applies to",
			fmt.Sprintf("move the [ssh] table into %s", inv))
	}
	if strings.TrimSpace(inv) == "" {
		w.add("inventory", "must name a file", `write inventory = "fleet.toml" (relative to the job file), or remove the line`)
		return nil, tbl{}, ""
	}
	shown, abs := inv, inv
	if !filepath.IsAbs(inv) {
		shown = filepath.Join(filepath.Dir(jobPath), inv)
		abs = filepath.Join(filepath.Dir(jobAbs), inv)
	}
	hw, htop := loadInventory(shown, abs, read, w.errs, func(msg string) *ConfigError {
		return &ConfigError{File: jobPath, Line: w.lines.lineOf("inventory"), Key: "inventory", Msg: msg,
			Fix: "check the path; a relative inventory path is relative to the job file's directory"}
	})
	return hw, htop, abs
}

// loadInventory reads and parses an inventory file; readErr builds the
// error for a file that cannot be read, placed where the path was given.
func loadInventory(show, abs string, read readFunc, errs *ConfigErrors, readErr func(string) *ConfigError) (*walker, tbl) {
	data, err := read(abs)
	if err != nil {
		*errs = append(*errs, readErr(fmt.Sprintf("read inventory %s: %v", show, err)))
		return nil, tbl{}
	}
	doc, lines, perr := parseTOML(show, data)
	if perr != nil {
		*errs = append(*errs, perr)
		return nil, tbl{}
	}
	w := &walker{file: show, lines: lines, errs: errs, top: doc}
	top := tbl{m: doc, schema: inventorySchema}
	w.unknown(top)
	return w, top
}

// parseTOML decodes src into a generic map and locates its keys; a syntax
// error comes back as a *ConfigError with its line.
func parseTOML(file string, src []byte) (map[string]any, keyLines, *ConfigError) {
	doc := map[string]any{}
	if _, err := toml.Decode(string(src), &doc); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, &ConfigError{File: file, Line: pe.Position.Line,
				Msg: "invalid TOML: " + pe.Message, Fix: syntaxFix(pe)}
		}
		return nil, nil, &ConfigError{File: file, Msg: "invalid TOML: " + err.Error(),
			Fix: "check the file against TOML syntax (https://toml.io)"}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	return doc, locateKeys(src), nil
}

func syntaxFix(pe toml.ParseError) string {
	if strings.Contains(pe.Message, "already been defined") {
		return "each key and each [table] may appear only once; merge or remove the repeated one"
	}
	if u := strings.TrimSpace(pe.Usage); u != "" {
		if i := strings.Index(u, "\n\n"); i > 0 {
			u = u[:i]
		}
		return strings.Join(strings.Fields(u), " ")
	}
	return fmt.Sprintf(`check line %d, column %d: keys are written key = value, strings in quotes ("mnist"), lists in brackets ([0, 1])`,
		pe.Position.Line, pe.Position.Col)
}

// sortErrors orders errors by file (in order of first appearance) and line,
// with errors of unknown line last in their file.
func sortErrors(errs ConfigErrors) {
	rank := map[string]int{}
	for _, e := range errs {
		if _, ok := rank[e.File]; !ok {
			rank[e.File] = len(rank)
		}
	}
	line := func(e *ConfigError) int {
		if e.Line == 0 {
			return int(^uint(0) >> 1)
		}
		return e.Line
	}
	sort.SliceStable(errs, func(i, j int) bool {
		if ri, rj := rank[errs[i].File], rank[errs[j].File]; ri != rj {
			return ri < rj
		}
		return line(errs[i]) < line(errs[j])
	})
}

// nameRE is what host and job names may contain: they become parts of file
// names, log prefixes and directories.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (w *walker) name(t tbl, key, what string) (string, bool) {
	s, ok := w.str(t, key)
	if !ok {
		return "", false
	}
	if s == "" || s == "." || s == ".." || !nameRE.MatchString(s) {
		w.add(t.key(key), fmt.Sprintf("%s name %s may contain only letters, digits, '.', '_' and '-' (it becomes part of file names)", what, show(s)),
			fmt.Sprintf("write %s = %q", key, sanitizeName(s)))
		return s, false
	}
	return s, true
}

// sanitizeName proposes a valid name close to s.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 128 && nameRE.MatchString(string(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" || out == "." || out == ".." {
		return "gpu-a"
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

// job reads the [job] table and applies defaults.
func (w *walker) job(top tbl, dir string) Job {
	j := defaultJob(dir)
	t, ok := w.table(top, "job", jobSchema)
	if !ok {
		if _, present := top.m["job"]; !present {
			w.missing(top, "job", "missing [job] table",
				`add a [job] table with at least name = "mnist", framework = "pytorch" and command = ["python3", "train.py"]`)
		}
		return j
	}
	w.unknown(t)
	w.jobIdentity(t, &j)
	w.jobCode(t, &j, dir)
	w.jobFiles(t, &j, dir)
	w.jobLayout(t, &j)
	w.jobRestarts(t, &j)
	if n, ok := w.count(t, "gpu_max_used_mib"); ok {
		j.GPUMaxUsedMiB = n
	}
	if n, ok := w.integer(t, "min_gpus", 0, 1024, "between 0 and 1024"); ok {
		j.MinGPUs = n
	}
	w.network(t, &j)
	j.Roles = w.roles(t, j.Framework)
	return j
}

// defaultJob is a job with every default set; dir is the job file's
// directory, the default code directory.
func defaultJob(dir string) Job {
	return Job{
		Code:              dir,
		CheckpointDir:     DefaultCheckpointDir,
		CheckpointCopies:  DefaultCheckpointCopies,
		CheckpointLayout:  LayoutSingle,
		CheckpointKeep:    DefaultCheckpointKeep,
		MaxRestarts:       DefaultMaxRestarts,
		ProcsPerHost:      DefaultProcsPerHost,
		MasterPort:        DefaultMasterPort,
		BasePort:          DefaultBasePort,
		Env:               map[string]string{},
		SuccessPolicy:     DefaultSuccessPolicy,
		RestartPolicy:     DefaultRestartPolicy,
		RestartBackoff:    DefaultRestartBackoff,
		RestartBackoffMax: DefaultRestartBackoffMax,
		StopGrace:         DefaultStopGrace,
		HostWait:          DefaultHostWait,
		GPUMaxUsedMiB:     DefaultGPUMaxUsedMiB,

		MaxRestartsWithoutProgress: DefaultMaxRestartsWithoutProgress,
		Health:                     DefaultHealth,
		IgnoreXIDs:                 slices.Clone(DefaultIgnoreXIDs),
	}
}

// jobIdentity reads what the job is: name, framework and command.
func (w *walker) jobIdentity(t tbl, j *Job) {
	if s, ok := w.name(t, "name", "job"); ok {
		j.Name = s
		w.checkJobName(t, s)
	} else if _, present := t.m["name"]; !present {
		w.missing(t, "name", "missing job name", `add name = "mnist" under [job]; it names the workdir and the logs`)
	}
	if f, ok := w.enum(t, "framework", string(PyTorch), string(Torchrun), string(TensorFlow), string(JAX)); ok {
		j.Framework = Framework(f)
	} else if _, present := t.m["framework"]; !present {
		w.missing(t, "framework", "missing framework", `add framework = "pytorch" (or "torchrun", "tensorflow", "jax") under [job]`)
	}
	j.Command = w.command(t)
}

// jobCode reads code, the directory pushed to the hosts, which must exist.
func (w *walker) jobCode(t tbl, j *Job, dir string) {
	if s, ok := w.str(t, "code"); ok {
		if s == "" {
			w.add(t.key("code"), "must not be empty", `write code = "." for the job file's directory`)
		} else if p, err := expandLocal(s, dir); err != nil {
			w.add(t.key("code"), err.Error(), `write an absolute path or one relative to the job file, e.g. code = "."`)
		} else {
			j.Code = p
		}
	}
	if fi, err := os.Stat(j.Code); err != nil {
		w.add(t.key("code"), fmt.Sprintf("code directory %s: %v", j.Code, errors.Unwrap(err)),
			`point code at the directory to push, relative to the job file (code = "." is the job file's directory)`)
	} else if !fi.IsDir() {
		w.add(t.key("code"), fmt.Sprintf("code %s is not a directory", j.Code),
			`point code at the directory that holds the training script, e.g. code = "."`)
	}
}

// jobFiles reads where the job's files go on the hosts and what is kept
// of them: workdir, checkpoints and their copies, push exclusions.
func (w *walker) jobFiles(t tbl, j *Job, dir string) {
	j.Workdir = "drover/" + j.Name
	if s, ok := w.remotePath(t, "workdir"); ok {
		j.Workdir = s
	}
	if s, ok := w.remotePath(t, "checkpoint_dir"); ok {
		j.CheckpointDir = s
		w.checkCheckpointDir(t, s, j.Workdir)
	}
	if s, ok := w.str(t, "checkpoint_marker"); ok {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00\n") {
			w.add(t.key("checkpoint_marker"), fmt.Sprintf("%s is not a file name", show(s)),
				`write the name of a file inside each checkpoint, e.g. checkpoint_marker = "DONE", or remove the line`)
		} else {
			j.CheckpointMarker = s
		}
	}
	if s, ok := w.str(t, "checkpoint_layout"); ok {
		switch s {
		case LayoutSingle, LayoutSharded:
			j.CheckpointLayout = s
		default:
			w.add(t.key("checkpoint_layout"), fmt.Sprintf("%s is not a checkpoint layout", show(s)),
				`write checkpoint_layout = "sharded" when every host writes its own part of each checkpoint (DCP, FSDP), or "single" (the default)`)
		}
	}
	if j.CheckpointLayout == LayoutSharded && j.CheckpointMarker == "" {
		j.CheckpointMarker = DefaultShardedMarker
	}
	w.checkpointCopies(t, j, dir)
	if pats, ok := w.strList(t, "exclude"); ok {
		for _, p := range pats {
			if strings.TrimSpace(p) == "" {
				w.add(t.key("exclude"), "contains an empty pattern", `remove the "" element; patterns look like "data/" or "*.pt"`)
			}
		}
		j.Exclude = pats
	}
	w.checkCheckpointMirror(t, j, dir)
}

// jobLayout reads how processes are laid out: processes per host, ports
// and the environment.
func (w *walker) jobLayout(t tbl, j *Job) {
	if n, ok := w.integer(t, "procs_per_host", 1, 4096, "between 1 and 4096"); ok {
		j.ProcsPerHost = n
	}
	if n, ok := w.port(t, "master_port"); ok {
		j.MasterPort = n
	}
	if n, ok := w.port(t, "base_port"); ok {
		j.BasePort = n
	}
	j.Env = w.env(t, "[job.env]", j.Framework)
}

// jobRestarts reads when the job succeeds and how it restarts.
func (w *walker) jobRestarts(t tbl, j *Job) {
	if n, ok := w.count(t, "max_restarts"); ok {
		j.MaxRestarts = n
	}
	if s, ok := w.enum(t, "success_policy", string(SuccessAllWorkers), string(SuccessChief)); ok {
		j.SuccessPolicy = SuccessPolicy(s)
	}
	if s, ok := w.enum(t, "restart_policy", string(RestartOnFailure), string(RestartNever), string(RestartExitCode)); ok {
		j.RestartPolicy = RestartPolicy(s)
	}
	if d, ok := w.duration(t, "restart_backoff"); ok {
		j.RestartBackoff = d
	}
	if d, ok := w.duration(t, "restart_backoff_max"); ok {
		j.RestartBackoffMax = d
	}
	if j.RestartBackoffMax < j.RestartBackoff {
		w.add(t.key("restart_backoff_max"),
			fmt.Sprintf("restart_backoff_max (%s) is shorter than restart_backoff (%s)", j.RestartBackoffMax, j.RestartBackoff),
			fmt.Sprintf("write restart_backoff_max = %q or more", j.RestartBackoff.String()))
	}
	if d, ok := w.duration(t, "stop_grace"); ok {
		j.StopGrace = d
	}
	if d, ok := w.duration(t, "host_wait"); ok {
		j.HostWait = d
	}
	w.recovery(t, j)
}

// recovery reads the keys that say how drover recovers from failures
// beyond restart_policy: hangs, exit-status lists and host failures.
func (w *walker) recovery(t tbl, j *Job) {
	if d, ok := w.duration(t, "hang_timeout"); ok {
		j.HangTimeout = d
	}
	if d, ok := w.duration(t, "controller_timeout"); ok {
		j.ControllerTimeout = d
	}
	j.RetryExitCodes, _ = w.exitCodes(t, "retry_exit_codes")
	j.FatalExitCodes, _ = w.exitCodes(t, "fatal_exit_codes")
	for _, c := range j.RetryExitCodes {
		if slices.Contains(j.FatalExitCodes, c) {
			w.add(t.key("fatal_exit_codes"), fmt.Sprintf("exit status %d is in both retry_exit_codes and fatal_exit_codes", c),
				fmt.Sprintf("remove %d from one of the two lists", c))
		}
	}
	j.MaxHostFailures = DefaultHostFailuresPerRestart * j.MaxRestarts
	if n, ok := w.count(t, "max_host_failures"); ok {
		j.MaxHostFailures = n
	}
	if n, ok := w.count(t, "max_restarts_without_progress"); ok {
		j.MaxRestartsWithoutProgress = n
	}
	w.health(t, j)
}

// health reads the GPU health gate's keys.
func (w *walker) health(t tbl, j *Job) {
	if s, ok := w.enum(t, "health", string(HealthEnforce), string(HealthWarn), string(HealthOff)); ok {
		j.Health = HealthMode(s)
	}
	v, ok := t.m["ignore_xids"]
	if !ok {
		return
	}
	arr, ok := v.([]any)
	if !ok {
		w.typeErr(t, "ignore_xids", "an array of Xid numbers", v)
		return
	}
	xids := make([]int, 0, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok || n < 1 || n > 999 {
			w.add(t.key("ignore_xids"), fmt.Sprintf("element %d (%s) is not an Xid between 1 and 999", i+1, show(e)),
				"write "+t.schema.example("ignore_xids")+" (NVIDIA's Xid catalogue: https://docs.nvidia.com/deploy/xid-errors/)")
			return
		}
		xids = append(xids, int(n))
	}
	j.IgnoreXIDs = xids
}

// checkpointCopies reads the keys of drover's checkpoint copies.
func (w *walker) checkpointCopies(t tbl, j *Job, dir string) {
	if n, ok := w.integer(t, "checkpoint_copies", 1, 64, "between 1 and 64 (1 turns copying off)"); ok {
		j.CheckpointCopies = n
	}
	if n, ok := w.integer(t, "checkpoint_keep", 1, 1000, "between 1 and 1000"); ok {
		j.CheckpointKeep = n
	}
	if p, ok := w.localPath(t, "checkpoint_mirror", dir); ok && p != "" {
		j.CheckpointMirror = p
	}
	if r, ok := w.byteRate(t, "checkpoint_copy_rate"); ok {
		j.CheckpointCopyRate = r
	}
}

// command reads job.command, which must be a non-empty array of strings.
func (w *walker) command(t tbl) []string {
	key := t.key("command")
	v, present := t.m["command"]
	if !present {
		w.missing(t, "command", "missing command", `add command = ["python3", "train.py"] under [job]`)
		return nil
	}
	if s, ok := v.(string); ok {
		fix := `write command = ["python3", "train.py"]`
		if f := strings.Fields(s); len(f) > 0 {
			q := make([]string, len(f))
			for i, a := range f {
				q[i] = strconv.Quote(a)
			}
			fix = "write command = [" + strings.Join(q, ", ") + "]"
		}
		w.add(key, "must be an array of arguments, not a string (drover runs it without a shell)", fix)
		return nil
	}
	args, ok := w.strList(t, "command")
	if !ok {
		return nil
	}
	if len(args) == 0 {
		w.add(key, "must not be empty", `write command = ["python3", "train.py"]`)
		return nil
	}
	if strings.TrimSpace(args[0]) == "" {
		w.add(key, "the program (first element) is empty", `write command = ["python3", "train.py"]`)
		return nil
	}
	if !w.checkArgs(t, args) {
		return nil
	}
	return args
}

// env reads t's env table, [job.env] or a host's [host.env] as title
// says: shell-identifier names that drover does not set itself for
// framework fw (ReservedEnv), scalar values.
func (w *walker) env(t tbl, title string, fw Framework) map[string]string {
	out := map[string]string{}
	et, ok := w.table(t, "env", tableSchema{title, nil})
	if !ok {
		return out
	}
	names := make([]string, 0, len(et.m))
	for k := range et.m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		key := et.key(k)
		if !ValidEnvName(k) {
			w.add(key, fmt.Sprintf("%s is not a valid environment variable name", show(k)),
				fmt.Sprintf("use letters, digits and '_', not starting with a digit, e.g. %s", sanitizeEnv(k)))
			continue
		}
		if ReservedEnv(fw, k) {
			fix := "remove it from " + title
			if k == "CUDA_VISIBLE_DEVICES" {
				fix += "; choose GPUs with gpus = [...] on each [[host]]"
			}
			w.add(key, fmt.Sprintf("drover sets %s itself for %s jobs", k, fw), fix)
			continue
		}
		switch v := et.m[k].(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				w.add(key, "value contains a NUL byte", "remove the \\u0000 from the value")
				continue
			}
			out[k] = v
		case int64:
			out[k] = strconv.FormatInt(v, 10)
		case float64:
			out[k] = strconv.FormatFloat(v, 'g', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			w.add(key, fmt.Sprintf("value must be a string, not %s", tomlType(v)),
				fmt.Sprintf(`write %s = "value"`, k))
		}
	}
	return out
}

func sanitizeEnv(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 128 && (r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || out[0] >= '0' && out[0] <= '9' {
		out = "_" + out
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

// roles reads [job.roles], which only a tensorflow job may have.
func (w *walker) roles(jt tbl, fw Framework) Roles {
	var r Roles
	_, present := jt.m["roles"]
	if present && fw != TensorFlow && fw != "" {
		w.add(jt.key("roles"), fmt.Sprintf("[job.roles] is set but framework is %q", fw),
			`roles are for tensorflow; remove [job.roles] or set framework = "tensorflow"`)
		return r
	}
	t, ok := w.table(jt, "roles", rolesSchema)
	if ok {
		w.unknown(t)
		if n, ok := w.count(t, "chief"); ok {
			if n > 1 {
				w.add(t.key("chief"), fmt.Sprintf("chief = %d, but TensorFlow has at most one chief", n),
					"write chief = 1 (or chief = 0 to let worker 0 lead) and add the rest as workers")
			} else {
				r.Chief = n
			}
		}
		if v, has := t.m["worker"]; has {
			if s, isStr := v.(string); isStr {
				if s == "auto" {
					r.WorkerAuto = true
				} else {
					w.add(t.key("worker"), fmt.Sprintf("worker = %q is neither a count nor \"auto\"", s),
						`write worker = "auto" (one worker per GPU left) or a count such as worker = 2`)
				}
			} else if n, ok := w.count(t, "worker"); ok {
				r.Worker = n
			}
		}
		if n, ok := w.count(t, "ps"); ok {
			r.PS = n
		}
		if n, ok := w.count(t, "evaluator"); ok {
			r.Evaluator = n
		}
	}
	if fw == TensorFlow && r.Chief == 0 && r.Worker == 0 && !r.WorkerAuto && !w.hasErrorAt(jt.key("roles")) {
		fix := `add worker = "auto" (one worker per GPU) or chief = 1 under [job.roles]`
		if !present {
			fix = `add a [job.roles] table, e.g. chief = 1 and worker = "auto"`
		}
		w.add(jt.key("roles"), "a tensorflow job needs a chief or at least one worker", fix)
	}
	return r
}

// missing reports a required key that t lacks, unless an unknown key of t
// is a typo of it: that error already tells the user what to write.
func (w *walker) missing(t tbl, name, msg, fix string) {
	for k := range t.m {
		if !t.schema.has(k) && suggest(k, t.schema.names()) == name {
			return
		}
	}
	if _, misplaced := w.top[name]; misplaced && t.path != "" && !topSchema.has(name) {
		return // reported as "belongs in [job]"
	}
	w.add(t.key(name), msg, fix)
}

// hasErrorAt reports whether an error was already recorded for key or a
// key under it, so one mistake is not reported twice.
func (w *walker) hasErrorAt(key string) bool {
	for _, e := range *w.errs {
		if e.File == w.file && (e.Key == key || strings.HasPrefix(e.Key, key+".")) {
			return true
		}
	}
	return false
}

// remotePath reads a path resolved on each host: kept as written, except
// that a leading "~/" is dropped because relative paths already are under
// the login user's home (SFTP and exec do not expand "~").
func (w *walker) remotePath(t tbl, name string) (string, bool) {
	s, ok := w.str(t, name)
	if !ok {
		return "", false
	}
	switch {
	case strings.TrimSpace(s) == "":
		w.add(t.key(name), "must not be empty", "write "+t.schema.example(name))
		return "", false
	case strings.ContainsAny(s, "\x00\n\r"):
		w.add(t.key(name), "contains a control character", "write "+t.schema.example(name))
		return "", false
	case s == "~":
		return ".", true
	case strings.HasPrefix(s, "~/"):
		rest := strings.TrimLeft(s[2:], "/")
		if rest == "" {
			rest = "."
		}
		return rest, true
	case strings.HasPrefix(s, "~"):
		w.add(t.key(name), fmt.Sprintf("%s: ~user paths are not expanded on hosts", show(s)),
			"write a path relative to the login user's home or an absolute path, e.g. "+t.schema.example(name))
		return "", false
	}
	return s, true
}

// expandLocal expands ~ and makes p absolute relative to dir.
func expandLocal(p, dir string) (string, error) {
	if strings.HasPrefix(p, "~") {
		name, rest, _ := strings.Cut(p[1:], "/")
		var home string
		if name == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("expand %s: %w", p, err)
			}
			home = h
		} else {
			u, err := user.Lookup(name)
			if err != nil {
				return "", fmt.Errorf("expand %s: %w", p, err)
			}
			home = u.HomeDir
		}
		p = filepath.Join(home, rest)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), nil
}

// localPath reads a local file path (identity_file, known_hosts).
func (w *walker) localPath(t tbl, name, dir string) (string, bool) {
	s, ok := w.str(t, name)
	if !ok {
		return "", false
	}
	if s == "" {
		return "", true // explicit "" = the transport's default
	}
	p, err := expandLocal(s, dir)
	if err != nil {
		w.add(t.key(name), err.Error(), "write an absolute path instead")
		return "", false
	}
	return p, true
}

// sshSettings are the connection keys shared by [ssh] and [[host]].
type sshSettings struct {
	User, IdentityFile, KnownHosts, ProxyJump string
	Port                                      int
}

// ssh reads the connection keys of t over base.
func (w *walker) ssh(t tbl, dir string, base sshSettings) sshSettings {
	s := base
	if v, ok := w.str(t, "user"); ok {
		if strings.ContainsAny(v, " \t\n@:/\x00") {
			w.add(t.key("user"), fmt.Sprintf("user %s contains a space, '@', ':' or '/'", show(v)),
				`write the login name alone, e.g. user = "ubuntu", and the machine in address`)
		} else {
			s.User = v
		}
	}
	if n, ok := w.port(t, "port"); ok {
		s.Port = n
	}
	if p, ok := w.localPath(t, "identity_file", dir); ok {
		s.IdentityFile = p
	}
	if p, ok := w.localPath(t, "known_hosts", dir); ok {
		s.KnownHosts = p
	}
	if v, ok := w.str(t, "proxy_jump"); ok {
		if strings.ContainsAny(v, " \t\n\x00") {
			w.add(t.key("proxy_jump"), fmt.Sprintf("proxy_jump %s contains a space", show(v)),
				`write one jump host, e.g. proxy_jump = "bastion" or "user@10.0.0.1:22" (several: "a,b")`)
		} else {
			s.ProxyJump = v
		}
	}
	return s
}

// hosts reads [ssh] and the [[host]] tables of the file holding the fleet.
func (w *walker) hosts(top tbl, dir string, fw Framework) []Host {
	var defaults sshSettings
	if st, ok := w.table(top, "ssh", sshSchema); ok {
		w.unknown(st)
		defaults = w.ssh(st, dir, defaults)
	}

	var tables []map[string]any
	switch v := top.m["host"].(type) {
	case nil:
		w.missing(top, "host", "no hosts",
			`add a [[host]] table for each machine, with name = "gpu-a" and address = "10.0.0.11" (or address = "local")`)
		return nil
	case []map[string]any:
		tables = v
	case []any:
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				w.add(indexPath("host", i+1), fmt.Sprintf("must be a table, not %s", tomlType(e)),
					`write each host as a [[host]] table with name and address`)
				continue
			}
			tables = append(tables, m)
		}
	case map[string]any:
		w.add("host", "[host] is a single table; hosts are an array of tables",
			"write [[host]] (double brackets) above each host")
		return nil
	default:
		w.add("host", fmt.Sprintf("must be [[host]] tables, not %s", tomlType(v)),
			`write a [[host]] table for each machine, with name and address`)
		return nil
	}

	var hosts []Host
	type seen struct {
		line int
		name string
	}
	names := map[string]seen{}
	addrs := map[string]seen{}
	for i, m := range tables {
		t := tbl{m: m, path: indexPath("host", i+1), schema: hostSchema}
		w.unknown(t)
		h, ok := w.host(t, dir, defaults, fw)
		if !ok {
			continue
		}
		if h.Name != "" {
			if s, dup := names[h.Name]; dup {
				w.add(t.key("name"), fmt.Sprintf("host name %q is used twice (first at line %d)", h.Name, s.line),
					fmt.Sprintf("give each host its own name, e.g. name = %q", h.Name+"-2"))
			} else {
				names[h.Name] = seen{h.Line, h.Name}
			}
		}
		if h.Transport == TransportSSH && h.Address != "" {
			k := strings.ToLower(h.Address) + "|" + strconv.Itoa(h.Port)
			if s, dup := addrs[k]; dup {
				w.add(t.key("address"), fmt.Sprintf("host %q has the same address and port as host %q (line %d)", h.Name, s.name, s.line),
					"list each machine once; use a different address or port, or remove the duplicate [[host]]")
			} else {
				addrs[k] = seen{h.Line, h.Name}
			}
		}
		hosts = append(hosts, h)
	}
	active := 0
	for _, h := range hosts {
		if !h.Spare {
			active++
		}
	}
	if len(hosts) > 0 && active == 0 {
		w.add("host", "every host is a spare; at least one must take part in the first plan",
			"remove spare = true from at least one [[host]]")
	}
	return hosts
}

// host reads one [[host]] table over the [ssh] defaults. ok is false when
// the table is too broken to use for duplicate checks.
func (w *walker) host(t tbl, dir string, defaults sshSettings, fw Framework) (Host, bool) {
	h := Host{Line: w.lines[t.path], GPUs: GPUSpec{Auto: true}, Transport: TransportSSH}
	name, nameOK := w.name(t, "name", "host")
	if _, present := t.m["name"]; !present {
		w.missing(t, "name", "missing host name",
			fmt.Sprintf(`add name = "gpu-a" to this [[host]] (%s); it labels the host's logs`, t.path))
	}
	if nameOK {
		h.Name = name
	}
	transport, tOK := w.enum(t, "transport", TransportSSH, TransportLocal)
	if tOK {
		h.Transport = transport
	}
	addr, addrOK := w.str(t, "address")
	switch {
	case addrOK && addr == TransportLocal:
		if tOK && transport == TransportSSH {
			w.add(t.key("transport"), `transport = "ssh" with address = "local"`,
				`write transport = "local" (or give the machine's address to reach it over SSH)`)
		}
		h.Transport = TransportLocal
		h.Address = addr
	case addrOK:
		if msg, fix := checkAddress(addr); msg != "" {
			w.add(t.key("address"), msg, fix)
		} else {
			h.Address = addr
		}
	case h.Transport == TransportLocal:
		if _, present := t.m["address"]; !present {
			h.Address = TransportLocal
		}
	default:
		if _, present := t.m["address"]; !present {
			label := t.path
			if h.Name != "" {
				label = fmt.Sprintf("host %q", h.Name)
			}
			w.missing(t, "address", "missing address of "+label,
				`add address = "10.0.0.11" (an IP or DNS name), or address = "local" for this machine`)
		}
	}
	s := w.ssh(t, dir, defaults)
	h.User, h.Port, h.IdentityFile, h.KnownHosts, h.ProxyJump = s.User, s.Port, s.IdentityFile, s.KnownHosts, s.ProxyJump
	if h.ProxyJump != "" && h.ProxyJump == h.Name {
		w.add(t.key("proxy_jump"), "a host cannot jump through itself",
			"name another host (a bastion) in proxy_jump, or remove it")
	}
	if g, ok := w.gpus(t); ok {
		h.GPUs = g
	}
	if n, ok := w.integer(t, "min_gpus", 0, 1024, "between 0 and 1024"); ok {
		h.MinGPUs = n
	}
	if b, ok := w.boolean(t, "spare"); ok {
		h.Spare = b
	}
	if p, ok := w.remotePath(t, "workdir"); ok {
		h.Workdir = p
	}
	if env := w.env(t, "[host.env]", fw); len(env) > 0 {
		h.Env = env
	}
	return h, true
}

// checkAddress returns what is wrong with an address and the fix, or "".
func checkAddress(a string) (msg, fix string) {
	switch {
	case a == "":
		return "address is empty", `write address = "10.0.0.11" (an IP or DNS name), or address = "local"`
	case strings.Contains(a, "@"):
		u, hst, _ := strings.Cut(a, "@")
		return fmt.Sprintf("address %s includes a user", show(a)),
			fmt.Sprintf("write user = %q and address = %q", u, hst)
	}
	if hst, p, err := net.SplitHostPort(a); err == nil {
		return fmt.Sprintf("address %s includes a port", show(a)),
			fmt.Sprintf("write address = %q and port = %s", hst, p)
	}
	if net.ParseIP(strings.SplitN(a, "%", 2)[0]) != nil {
		return "", ""
	}
	if !hostnameRE.MatchString(a) {
		return fmt.Sprintf("address %s is not an IP address or DNS name", show(a)),
			`write an IP or DNS name, e.g. address = "10.0.0.11" or "gpu-a.example.com"`
	}
	return "", ""
}

// hostnameRE accepts DNS names and ~/.ssh/config aliases.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)

// gpus reads a host's gpus: "auto", or a list of GPU indices.
func (w *walker) gpus(t tbl) (GPUSpec, bool) {
	key := t.key("gpus")
	const fix = `write gpus = "auto" to use every free GPU, gpus = [0, 1] to pin GPUs by index, or gpus = [] for none`
	v, present := t.m["gpus"]
	if !present {
		return GPUSpec{Auto: true}, false
	}
	switch x := v.(type) {
	case string:
		if x == "auto" {
			return GPUSpec{Auto: true}, true
		}
		w.add(key, fmt.Sprintf("gpus = %q is not understood", x), fix)
	case int64:
		f := fix
		if x > 0 && x <= 16 {
			idx := make([]string, x)
			for i := range idx {
				idx[i] = strconv.Itoa(i)
			}
			f = fmt.Sprintf(`gpus lists GPU indices, not a count: write gpus = [%s] to use GPUs 0 to %d, or gpus = "auto" with min_gpus = %d`,
				strings.Join(idx, ", "), x-1, x)
		}
		w.add(key, fmt.Sprintf("gpus = %d is a number, not a list of GPU indices", x), f)
	case []any:
		spec := GPUSpec{List: []int{}}
		ok := true
		dup := map[int64]bool{}
		for i, e := range x {
			n, isInt := e.(int64)
			switch {
			case !isInt:
				w.add(key, fmt.Sprintf("element %d must be a GPU index (integer), not %s (%s)", i+1, tomlType(e), show(e)), fix)
				ok = false
			case n < 0 || n > 1023:
				w.add(key, fmt.Sprintf("GPU index %d is out of range", n), "GPU indices start at 0 (nvidia-smi numbering); "+fix)
				ok = false
			case dup[n]:
				w.add(key, fmt.Sprintf("GPU %d is listed twice", n), "list each GPU index once")
				ok = false
			default:
				dup[n] = true
				spec.List = append(spec.List, int(n))
			}
		}
		if ok {
			return spec, true
		}
	default:
		w.add(key, fmt.Sprintf("must be \"auto\" or a list of GPU indices, not %s", tomlType(v)), fix)
	}
	return GPUSpec{Auto: true}, false
}
