package config

import (
	"strconv"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Framework names how processes are laid out and which environment they get.
type Framework string

// The frameworks drover knows how to lay out.
const (
	// PyTorch starts one process per selected GPU (or procs_per_host per
	// CPU host), each with the torch.distributed env:// variables.
	PyTorch Framework = "pytorch"
	// Torchrun starts one torchrun per host, which spawns the local workers.
	Torchrun Framework = "torchrun"
	// TensorFlow places chief/worker/ps/evaluator tasks and computes TF_CONFIG.
	TensorFlow Framework = "tensorflow"
	// JAX starts one process per host (procs_per_host per host, its GPUs
	// dealt out among them), each with what jax.distributed.initialize reads.
	JAX Framework = "jax"
)

// Config is a loaded, validated job together with its fleet. It is what every
// other package consumes; nothing downstream reads TOML.
type Config struct {
	// Path is the absolute path of the job file; logs and relative paths in
	// the job are anchored next to it.
	Path string
	// InventoryPath is the absolute path of the file the hosts came from
	// (equal to Path when they are in the job file). Drover re-reads it at
	// every restart so that edited addresses take effect.
	InventoryPath string
	Job           Job
	// Hosts in file order; rank order follows this order.
	Hosts []Host
	// FromAllocation says that Hosts are the Slurm allocation's
	// (LoadOptions.Allocation), in SLURM_JOB_NODELIST order.
	FromAllocation bool
	// Slurm is the [slurm] table: how drover submit asks for an allocation.
	Slurm Slurm
	// Data are the [[data]] tables, in file order: what drover stages
	// onto every host (package launcher/stage).
	Data []DataSet
	// Sweep is the [sweep] table: drover sweep's defaults.
	Sweep Sweep
}

// Job is the [job] table with defaults applied and paths made absolute
// (Code); remote paths (Workdir, CheckpointDir) stay as written because they
// are resolved on each host.
type Job struct {
	Name      string
	Framework Framework
	Command   []string
	// Code is the absolute local directory pushed to every host.
	Code string
	// Workdir is where Code lands on each host; relative to the login
	// user's home unless absolute.
	Workdir string
	// CheckpointDir is relative to Workdir unless absolute.
	CheckpointDir string
	// CheckpointMarker, when set, names a file (e.g. "DONE") that must exist
	// inside a checkpoint entry for it to count as complete.
	CheckpointMarker string
	// CheckpointLayout is LayoutSingle (each checkpoint is one host's
	// entry) or LayoutSharded (each is the same-named directory on every
	// host of the group, one part each, complete when CheckpointMarker is
	// in one of them).
	CheckpointLayout string
	// CheckpointCopies is how many hosts should hold each checkpoint
	// (drover copies it to the others); 1 turns copying off.
	CheckpointCopies int
	// CheckpointKeep is how many of its own copies drover keeps per host
	// and in the mirror.
	CheckpointKeep int
	// CheckpointMirror, when set, is an absolute directory on the
	// controller that gets a copy of every checkpoint as well.
	CheckpointMirror string
	// CheckpointCopyRate, when positive, caps in bytes per second how fast
	// drover reads a checkpoint from the host that wrote it while training
	// runs (each destination receives it at that rate too); 0 is no cap.
	CheckpointCopyRate int64
	// DataCopyRate, when positive, caps in bytes per second how fast each
	// data set is read from its source while staged (data_copy_rate).
	DataCopyRate int64
	// MinBandwidth, when positive, is the slowest link in bits per
	// second that `drover check net` (and preflight = ["net"]) accepts.
	MinBandwidth float64
	// Preflight names the checks run before the first attempt ("net");
	// a host that fails one is swapped for a spare.
	Preflight   []string
	MaxRestarts int
	// ProcsPerHost applies to hosts without GPUs (pytorch, torchrun).
	ProcsPerHost int
	MasterPort   int
	BasePort     int
	Env          map[string]string
	Roles        Roles
	// Exclude holds gitignore-style patterns that push skips, in addition
	// to .git/ and the code directory's .droverignore.
	Exclude []string

	// Setup are shell lines every host runs in its workdir, in order, after
	// the push and before the first process starts (docs/environments.md);
	// a host whose last successful setup had the same lines, SetupKey
	// contents and architecture skips them. SetupTimeout bounds a host's.
	Setup        []string
	SetupKey     []string
	SetupTimeout time.Duration
	// Container, when set, is the image every process runs in (see
	// container.go).
	Container Container

	// SuccessPolicy is "all-workers" (default) or "chief" (tensorflow).
	SuccessPolicy SuccessPolicy
	// RestartPolicy is "on-failure" (default), "never" or "exit-code".
	RestartPolicy RestartPolicy
	// RestartBackoff is the first delay between attempts; it doubles up to
	// RestartBackoffMax.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// StopGrace is how long processes get between SIGTERM and SIGKILL.
	StopGrace time.Duration
	// HostWait is how long an unreachable host is waited for at a restart
	// before a spare replaces it.
	HostWait time.Duration
	// HangTimeout, when positive, is how long the group may go without
	// any process showing progress (an output line, a touch of
	// DROVER_PROGRESS_FILE) before it counts as hung and is restarted.
	HangTimeout time.Duration
	// ControllerTimeout is how long a detached run's agents keep the group
	// with no supervisor attached before stopping it; 0 (the default)
	// keeps it for as long as it runs, which is what lets a run outlive
	// the machine that started it. Foreground runs keep their agents'
	// few-second heartbeat whatever this says: Ctrl-C and a SIGKILLed
	// drover must still leave nothing behind.
	ControllerTimeout time.Duration
	// RetryExitCodes are exit statuses always worth a restart, and
	// FatalExitCodes ones never worth it, whatever RestartPolicy says.
	RetryExitCodes []int
	FatalExitCodes []int
	// MaxHostFailures bounds the restarts caused by lost hosts and hangs,
	// which do not count against MaxRestarts (default 3 x MaxRestarts).
	MaxHostFailures int
	// MinHosts is the fewest hosts the group may shrink to when a host is
	// lost and no spare takes its place within HostWait (min_hosts); 0,
	// the default, is every host: no shrinking.
	MinHosts int
	// Regrow says when a host that answers again rejoins a shrunk group:
	// at the next restart ("", the default, or RegrowRestart), or also
	// right after the next new checkpoint (RegrowCheckpoint).
	Regrow Regrow
	// MaxRestartsWithoutProgress stops the run after this many restarts
	// in a row that resumed from a checkpoint and failed before a newer
	// one appeared (a crash loop no restart fixes); 0 turns it off.
	MaxRestartsWithoutProgress int
	// Health says what a GPU health finding does (health): keep the host
	// out (enforce, the default), only warn, or nothing (off).
	Health HealthMode
	// IgnoreXIDs are the Xids that are warnings rather than critical
	// (ignore_xids; default DefaultIgnoreXIDs).
	IgnoreXIDs []int

	// GPUMaxUsedMiB: a GPU with more memory in use than this counts as busy.
	GPUMaxUsedMiB int
	// MinGPUs is the default minimum number of selected GPUs per GPU host
	// (0 = no minimum); a host's own min_gpus overrides it.
	MinGPUs int

	// Notifications (see notify.go): OnEvent is a command the controller
	// runs for each event (on_event), Webhook a URL it POSTs each to,
	// WebhookFormat the body's shape (WebhookJSON, the default, or
	// WebhookSlack), and Notify the kinds of event sent (empty: all).
	OnEvent       []string
	Webhook       string
	WebhookFormat string
	Notify        []string
	// Tracker names the experiment tracker whose run ids drover sets
	// from its own (tracker; "" for none).
	Tracker Tracker
	// GPUsPerHost (gpus_per_host) is how many of each host's selectable
	// GPUs the job takes and leases (0: all of them).
	GPUsPerHost int
	// Straggler is the straggler watch's settings (straggler.go).
	Straggler Straggler
}

// HealthMode is the job's health key.
type HealthMode string

// The health modes.
const (
	// HealthEnforce: a host with a critical GPU finding is kept out of
	// the group, as a lost host is.
	HealthEnforce HealthMode = "enforce"
	// HealthWarn: findings are events only.
	HealthWarn HealthMode = "warn"
	// HealthOff: GPU health is not read.
	HealthOff HealthMode = "off"
)

// RestartPolicy says which failed attempts drover restarts (restart_policy).
type RestartPolicy string

// The restart policies.
const (
	// RestartOnFailure restarts after any failure.
	RestartOnFailure RestartPolicy = "on-failure"
	// RestartNever ends the run at the first failure.
	RestartNever RestartPolicy = "never"
	// RestartExitCode treats exit statuses 1-127 as permanent and
	// 128-255 (signals) and lost hosts as worth a restart.
	RestartExitCode RestartPolicy = "exit-code"
)

// SuccessPolicy says when a TensorFlow job has succeeded (success_policy).
type SuccessPolicy string

// The success policies.
const (
	// SuccessAllWorkers: the chief and every worker exited 0.
	SuccessAllWorkers SuccessPolicy = "all-workers"
	// SuccessChief: the chief (or worker 0 without one) exited 0.
	SuccessChief SuccessPolicy = "chief"
)

// Regrow is when a host that answers again rejoins a shrunk group.
type Regrow string

// Regrow values.
const (
	RegrowRestart    Regrow = "restart"
	RegrowCheckpoint Regrow = "checkpoint"
)

// Roles are the TensorFlow replica counts. WorkerAuto means "one worker per
// GPU/slot left after chief, ps and evaluator are placed".
type Roles struct {
	Chief      int
	Worker     int
	WorkerAuto bool
	PS         int
	Evaluator  int
}

// Transport kinds for Host.Transport: the transports' own names.
const (
	TransportSSH   = cluster.TransportSSH
	TransportLocal = cluster.TransportLocal
)

// Host is one machine of the fleet with the [ssh] defaults already merged in.
type Host struct {
	Name string
	// Address is an IP or DNS name as written; it is resolved at each
	// (re)start, never cached across attempts. "local" for local hosts.
	Address string
	// Transport is TransportSSH, TransportLocal or TransportSlurm.
	Transport string

	User         string
	Port         int
	IdentityFile string // absolute, ~ expanded; "" = ssh config / agent / defaults
	KnownHosts   string // absolute, ~ expanded
	ProxyJump    string // "user@host:port" or a host name from the inventory

	GPUs GPUSpec
	// MinGPUs makes a shortfall of free GPUs on this host an error.
	MinGPUs int
	// Spare hosts take no part in the first plan; they replace a host that
	// stays unreachable for HostWait.
	Spare bool
	// Workdir is where the code lands on this host: the host's own
	// workdir (several local hosts on one machine need distinct ones),
	// else Job.Workdir. Load fills it in, so no other package applies
	// that default.
	Workdir string
	// Env is [host.env]: variables for every process on this host (a PATH,
	// another python), over [job.env]. Like [job.env] it may not set what
	// drover sets (checked at load, with the line).
	Env map[string]string

	// Line is the line of the [[host]] header in InventoryPath, for errors.
	Line int
}

// Endpoint is what the transports need of h to reach it. The conversion
// goes this way (config knows cluster, never the reverse) so that the
// transports do not depend on the job file.
func (h Host) Endpoint() cluster.Endpoint {
	return cluster.Endpoint{Name: h.Name, Address: h.Address, Transport: h.Transport,
		User: h.User, Port: h.Port, IdentityFile: h.IdentityFile, KnownHosts: h.KnownHosts,
		ProxyJump: h.ProxyJump, Workdir: h.Workdir}
}

// Endpoints converts every host, in order (DialAll's hosts, DialOptions'
// Inventory).
func Endpoints(hosts []Host) []cluster.Endpoint {
	es := make([]cluster.Endpoint, len(hosts))
	for i, h := range hosts {
		es[i] = h.Endpoint()
	}
	return es
}

// GPUSpec says which GPUs of a host to use.
type GPUSpec struct {
	// Auto means probe over NVML and use the free GPUs.
	Auto bool
	// List pins GPU indices (NVML/PCI bus order); empty with Auto false
	// means the host has no GPUs to use.
	List []int
}

// String renders the spec as written in TOML: "auto", [] or [0, 1].
func (g GPUSpec) String() string {
	if g.Auto {
		return "auto"
	}
	s := "["
	for i, n := range g.List {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(n)
	}
	return s + "]"
}

// Values of checkpoint_layout.
const (
	LayoutSingle  = "single"
	LayoutSharded = "sharded"
)
