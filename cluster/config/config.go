package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
		cfg.Job = jobReader{w}.job(top, filepath.Dir(jobAbs))
	}
	cfg.Slurm = slurmReader{w}.slurm(top)
	cfg.Sweep = sweepReader{w}.sweep(top)

	// Find the file that holds the hosts.
	var hw *walker
	var htop tbl
	var hostsAbs string
	switch {
	case opts.InventoryPath == InventorySlurm:
		// --inventory slurm: the same job file, on the allocation's nodes.
		cfg.FromAllocation, cfg.InventoryPath = true, jobAbs
		cfg.Hosts = inventoryReader{w}.allocationHosts(opts, "", "--inventory slurm takes the hosts from the allocation")
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
		cfg.Hosts = inventoryReader{w}.slurmInventory(doc, opts)
	case doc["inventory"] == nil && doc["host"] == nil && (opts.Allocation != nil || opts.Submit):
		cfg.FromAllocation, cfg.InventoryPath = true, jobAbs
		cfg.Hosts = slices.Clone(opts.Allocation)
	case doc["inventory"] != nil:
		hw, htop, hostsAbs = inventoryReader{w}.namedInventory(top, jobPath, jobAbs, read)
	default:
		hw, htop, hostsAbs = w, top, jobAbs
	}
	if hw != nil {
		cfg.InventoryPath = hostsAbs
		cfg.Hosts = hostsReader{hw}.hosts(htop, filepath.Dir(hostsAbs), cfg.Job.Framework)
	}
	cfg.Data = dataReader{w}.data(top, filepath.Dir(jobAbs), cfg.Hosts)
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
