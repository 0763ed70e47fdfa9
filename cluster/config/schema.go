package config

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// field is one key a table accepts, with the line a user would write for
// it; the example becomes the Fix of a type error.
type field struct {
	name    string
	example string
}

var topFields = []field{
	{"job", "[job]"},
	{"ssh", "[ssh]"},
	{"host", "[[host]]"},
	{"inventory", `inventory = "fleet.toml"`},
	{"slurm", "[slurm]"},
	{"data", "[[data]]"},
	{"sweep", "[sweep]"},
}

var inventoryTopFields = []field{
	{"ssh", "[ssh]"},
	{"host", "[[host]]"},
}

var jobFields = append([]field{
	{"name", `name = "mnist"`},
	{"framework", `framework = "pytorch"`},
	{"command", `command = ["python3", "train.py"]`},
	{"code", `code = "."`},
	{"workdir", `workdir = "drover/mnist"`},
	{"checkpoint_dir", `checkpoint_dir = "checkpoints"`},
	{"checkpoint_marker", `checkpoint_marker = "DONE"`},
	{"checkpoint_layout", `checkpoint_layout = "sharded"`},
	{"checkpoint_copies", `checkpoint_copies = 2`},
	{"checkpoint_keep", `checkpoint_keep = 2`},
	{"checkpoint_mirror", `checkpoint_mirror = "../checkpoint-mirror"`},
	{"checkpoint_copy_rate", `checkpoint_copy_rate = "50MB/s"`},
	{"data_copy_rate", `data_copy_rate = "200MB/s"`},
	{"max_restarts", `max_restarts = 3`},
	{"procs_per_host", `procs_per_host = 2`},
	{"master_port", `master_port = 29500`},
	{"base_port", `base_port = 2222`},
	{"env", `[job.env] with NAME = "value" lines`},
	{"roles", `[job.roles] with chief = 1 and worker = "auto"`},
	{"exclude", `exclude = ["data/", "*.pt"]`},
	{"success_policy", `success_policy = "all-workers"`},
	{"restart_policy", `restart_policy = "on-failure"`},
	{"restart_backoff", `restart_backoff = "1s"`},
	{"restart_backoff_max", `restart_backoff_max = "30s"`},
	{"stop_grace", `stop_grace = "10s"`},
	{"host_wait", `host_wait = "5m"`},
	{"hang_timeout", `hang_timeout = "30m"`},
	{"controller_timeout", `controller_timeout = "1h"`},
	{"retry_exit_codes", `retry_exit_codes = [75, 143]`},
	{"fatal_exit_codes", `fatal_exit_codes = [2, 64]`},
	{"max_host_failures", `max_host_failures = 9`},
	{"min_hosts", `min_hosts = 2`},
	{"regrow", `regrow = "checkpoint"`},
	{"max_restarts_without_progress", `max_restarts_without_progress = 3`},
	{"health", `health = "enforce"`},
	{"ignore_xids", `ignore_xids = [13, 31, 43, 45, 68, 109]`},
	{"gpu_max_used_mib", `gpu_max_used_mib = 100`},
	{"min_gpus", `min_gpus = 1`},
	{"gpus_per_host", `gpus_per_host = 1`},
	{"min_bandwidth", `min_bandwidth = "10Gbit"`},
	{"preflight", `preflight = ["net"]`},
	{"on_event", `on_event = ["./notify.sh"]`},
	{"webhook", `webhook = "https://hooks.slack.com/services/T000/B000/XXXX"`},
	{"webhook_format", `webhook_format = "slack"`},
	{"notify", `notify = ["restarted", "failed", "finished"]`},
	{"tracker", `tracker = "wandb"`},
	{"container", `container = { image = "nvcr.io/nvidia/pytorch:24.05-py3", runtime = "podman" }`},
}, append(setupFields, stragglerFields...)...)

var roleFields = []field{
	{"chief", `chief = 1`},
	{"worker", `worker = 2 (or worker = "auto")`},
	{"ps", `ps = 1`},
	{"evaluator", `evaluator = 0`},
}

var sshFields = []field{
	{"user", `user = "ubuntu"`},
	{"port", `port = 22`},
	{"identity_file", `identity_file = "~/.ssh/id_ed25519"`},
	{"known_hosts", `known_hosts = "~/.ssh/known_hosts"`},
	{"proxy_jump", `proxy_jump = "bastion"`},
}

var hostFields = append([]field{
	{"name", `name = "gpu-a"`},
	{"address", `address = "10.0.0.11"`},
	{"transport", `transport = "ssh"`},
	{"gpus", `gpus = "auto"`},
	{"min_gpus", `min_gpus = 1`},
	{"spare", `spare = true`},
	{"workdir", `workdir = "drover/mnist-a"`},
	{"env", `[host.env] with NAME = "value" lines`},
}, sshFields...)

// tableSchema describes one TOML table for unknown-key checks.
type tableSchema struct {
	title  string // as the user writes it: "[job]", "[[host]]", "the top level"
	fields []field
}

var (
	topSchema       = tableSchema{"the top level", topFields}
	inventorySchema = tableSchema{"the top level of an inventory file", inventoryTopFields}
	jobSchema       = tableSchema{"[job]", jobFields}
	rolesSchema     = tableSchema{"[job.roles]", roleFields}
	sshSchema       = tableSchema{"[ssh]", sshFields}
	hostSchema      = tableSchema{"[[host]]", hostFields}
)

// homes lists, for keys users put in the wrong table, where they belong.
var homes = []tableSchema{jobSchema, sshSchema, hostSchema, rolesSchema, slurmSchema, topSchema}

func (ts tableSchema) example(name string) string {
	for _, f := range ts.fields {
		if f.name == name {
			return f.example
		}
	}
	return ""
}

func (ts tableSchema) has(name string) bool {
	for _, f := range ts.fields {
		if f.name == name {
			return true
		}
	}
	return false
}

func (ts tableSchema) names() []string {
	ns := make([]string, len(ts.fields))
	for i, f := range ts.fields {
		ns[i] = f.name
	}
	return ns
}

// tbl is a decoded TOML table and its path in error keys.
type tbl struct {
	m      map[string]any
	path   string
	schema tableSchema
}

func (t tbl) key(name string) string { return keyPath(t.path, name) }

func unknownFix(k string, ts tableSchema) string {
	if ts.title == inventorySchema.title && topSchema.has(k) {
		return fmt.Sprintf("an inventory file holds only [ssh] and [[host]]; move %s to the job file", k)
	}
	if s := suggest(k, ts.names()); s != "" {
		return fmt.Sprintf("did you mean %q? write %s", s, ts.example(s))
	}
	for _, h := range homes {
		if h.title != ts.title && h.has(k) {
			return fmt.Sprintf("%s belongs in %s, not in %s; move it there", k, h.title, ts.title)
		}
	}
	return fmt.Sprintf("remove it; %s accepts %s", ts.title, strings.Join(ts.names(), ", "))
}

// suggest returns the known name closest to k when it is close enough to
// be a typo, else "".
func suggest(k string, known []string) string {
	best, bestD := "", math.MaxInt
	lk := strings.ToLower(strings.ReplaceAll(k, "-", "_"))
	for _, n := range known {
		d := editDistance(lk, n)
		if d < bestD {
			best, bestD = n, d
		}
	}
	limit := 2
	if len(k) <= 4 {
		limit = 1
	}
	if bestD <= limit {
		return best
	}
	return ""
}

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours ("nmae")
// each count 1, which is what typing mistakes look like.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt // not a typo of a short key name
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// tomlType names a decoded value's TOML type for messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date/time"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// show renders a scalar value for a message, shortened.
func show(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = fmt.Sprintf("%q", x)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	default:
		s = fmt.Sprint(x)
	}
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}
