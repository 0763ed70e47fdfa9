package plan

import (
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// Process roles. PyTorch processes are all "worker"s (their index is the
// global rank); a torchrun job has one "node" per host; TensorFlow roles are
// the lower-case replica types TF_CONFIG uses.
type Role string

// The roles a plan gives processes.
const (
	RoleWorker    Role = "worker"
	RoleNode      Role = "node"
	RoleChief     Role = "chief"
	RolePS        Role = "ps"
	RoleEvaluator Role = "evaluator"
	// RoleProcess is a JAX process; its index is jax's process_id.
	RoleProcess Role = "process"
)

// Defaults used when a Config arrives without them (config.Load applies
// its own defaults; these keep Build total for hand-built configs).
const (
	defaultMasterPort = 29500
	defaultBasePort   = 2222
	// localAddress is what processes on a local host use to reach each
	// other: a local host's Address is "local", which no resolver knows.
	localAddress = "127.0.0.1"
)

// HostGPUs is what the planner knows of one host's GPUs: the indices
// selected for the job (after probing and dropping busy ones). Probed=false
// with no Indices on a gpus = "auto" host means nobody has looked yet.
type HostGPUs struct {
	Indices []int
	Probed  bool
}

// Process is one command drover starts on one host, with everything needed
// to start it again identically: the run supervisor starts exactly this,
// and `drover plan` shows exactly this.
type Process struct {
	Host config.Host
	// Address is how other processes reach this one's host (MASTER_ADDR,
	// TF_CONFIG entries): Host.Address, or 127.0.0.1 for local hosts.
	Address string
	Role    Role
	// Index is the process's index within its role: the global rank for
	// pytorch, the node rank for torchrun, the task index for tensorflow.
	Index int
	// Rank, LocalRank and NodeRank are the torch.distributed ranks; -1
	// where they do not apply (LocalRank/Rank for torchrun, which assigns
	// them itself; all three for tensorflow).
	Rank      int
	LocalRank int
	NodeRank  int
	// GPUs are the GPU indices the process itself uses: the one its
	// LOCAL_RANK selects (pytorch), the host's (torchrun), its own
	// (tensorflow) or its share of the host's (jax); empty means none.
	GPUs []int
	// Visible is what CUDA_VISIBLE_DEVICES lists. For pytorch, torchrun
	// and jax it is every GPU selected on the host, the same list for
	// every process there, so that LOCAL_RANK (or JAX_LOCAL_DEVICE_IDS)
	// indexes it, as under torchrun: torch.cuda.set_device(LOCAL_RANK)
	// then names the process's own GPU, and NCCL sees its peers' devices.
	// For tensorflow it equals GPUs: each task uses every GPU it sees.
	Visible []int
	// Port is the TensorFlow task's port; 0 for pytorch and torchrun,
	// whose rank 0 listens on MASTER_PORT.
	Port int
	// Workdir is the working directory on the host as written
	// (Host.Workdir or Job.Workdir); relative paths are under the login
	// user's home.
	Workdir string
	// Env is the full environment drover sets, [job.env] included.
	Env map[string]string
	// Command is the argv to run; with a container, the runtime's run
	// command around the job's command (wrapContainers).
	Command []string
	// Container is the name of the process's container under docker or
	// podman, which drover removes when the process ends; "" without one
	// (and under apptainer, whose containers are plain processes).
	Container string
}

// Name identifies the process in log prefixes ([worker-3@gpu-b]) and log
// file names: role and index, stable across restarts.
func (p Process) Name() string { return string(p.Role) + "-" + strconv.Itoa(p.Index) }

// Plan is every process of one attempt of a job. It is pure data, computed
// without touching the network, so `drover plan` can show what `drover run`
// will start.
type Plan struct {
	Job       string
	Framework config.Framework
	Processes []Process
	// Hosts are the participating hosts (spares excluded), in file order.
	Hosts []config.Host
	// Notes are things the user should know about the plan (unprobed
	// hosts, unused spares), one sentence each.
	Notes []string
	// Unprobed names the gpus = "auto" hosts that were planned as CPU
	// hosts because no probe result was given.
	Unprobed []string
	// JobEnv is [job.env] as given, so renderings can show it once.
	JobEnv map[string]string
}

// PlanInput is everything Build needs; nothing else is read.
type PlanInput struct {
	Config *config.Config
	// GPUs are the selected GPUs per host name. An entry with Probed set
	// (or with Indices) is authoritative; otherwise a host's gpus list is
	// used, and a gpus = "auto" host counts as unprobed.
	GPUs map[string]HostGPUs
	// RestartCount is the attempt number, 0 for the first
	// (DROVER_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT).
	RestartCount int
	// ResumeFrom is the checkpoint to resume from, "" for none
	// (DROVER_RESUME_FROM).
	ResumeFrom string
	// HostResumeFrom, when it has an entry for a host, is the checkpoint's
	// path on that host instead of ResumeFrom: drover stages a copy onto
	// each host, so the path differs per host.
	HostResumeFrom map[string]string
	// HostHome is the absolute home directory per host name when known,
	// to make DROVER_CHECKPOINT_DIR absolute; otherwise it is given in
	// "~/..." form.
	HostHome map[string]string
	// Ifaces is, per host name, the network interface whose route reaches
	// the rendezvous address (MASTER_ADDR; found on the host by
	// DiscoverIfaces). It becomes NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME
	// there unless [job.env] or [host.env] sets them, so that the
	// collectives do not pick the interface of the default route, which on
	// hosts with two networks is often not the one the others can reach.
	Ifaces map[string]string
	// MasterPort, when non-zero, replaces master_port, and BasePorts
	// replaces base_port on the given addresses (tensorflow): the ports a
	// restart's preflight found free when the configured ones were still
	// held. `drover plan` shows the configured ports.
	MasterPort int
	BasePorts  map[string]int
	// RunID is the run's id (DROVER_RUN_ID, and the tracker's ids): the
	// same in every attempt of the run, adopted ones included; "" leaves
	// them out (`drover plan`, before there is a run).
	RunID string
	// Attempt is the attempt's number, 1 for the first (DROVER_ATTEMPT);
	// 0 leaves it out.
	Attempt int
	// PrevWorldSize is the world size of the last attempt that ran (0 on
	// the first): when this plan's differs (the group shrank or grew,
	// min_hosts), every process gets DROVER_WORLD_CHANGED=1 and
	// DROVER_PREV_WORLD_SIZE, so that a script can rescale its batch or
	// learning rate.
	PrevWorldSize int
}

// Variables drover sets from PlanInput.Ifaces.
const (
	ncclIfaceEnv = "NCCL_SOCKET_IFNAME"
	glooIfaceEnv = "GLOO_SOCKET_IFNAME"
)

// hostSlots is one participating host as the placer sees it.
type hostSlots struct {
	host     config.Host
	index    int // among participating hosts
	addr     string
	gpus     []int
	cpuSlots int // > 0 only when gpus is empty
	unprobed bool
	basePort int // replaces base_port when > 0 (PlanInput.BasePorts)
}

// Build lays out the processes of one attempt. It is pure: same input, same
// plan. Problems the user fixes in the job or inventory file are returned
// as *config.ConfigError (or config.ConfigErrors).
func Build(in PlanInput) (*Plan, error) {
	cfg := in.Config
	if cfg == nil {
		return nil, errors.New("build plan: no config")
	}
	if in.MasterPort > 0 {
		moved := *cfg
		moved.Job.MasterPort = in.MasterPort
		cfg = &moved
	}
	job := cfg.Job
	if !config.KnownFramework(job.Framework) {
		return nil, config.ConfigErrors{&config.ConfigError{File: cfg.Path, Key: "job.framework",
			Msg: fmt.Sprintf("unknown framework %q", job.Framework),
			Fix: `use "pytorch", "torchrun", "tensorflow" or "jax"`}}
	}
	errs := checkJob(cfg)
	p := &Plan{Job: job.Name, Framework: job.Framework, JobEnv: copyEnv(job.Env)}
	slots := placeHosts(cfg, in, p)
	if len(slots) == 0 {
		invFile := cfg.InventoryPath
		if invFile == "" {
			invFile = cfg.Path
		}
		errs = append(errs, &config.ConfigError{File: invFile, Key: "host",
			Msg: "no hosts to run on (every host is a spare, or there are none)",
			Fix: "add a [[host]] without spare = true"})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var err error
	if p.Processes, err = frameworkProcesses(cfg, slots); err != nil {
		return nil, err
	}
	if err := checkLocalMix(cfg, p, slots); err != nil {
		return nil, err
	}
	setEnv(p, in, job, len(slots))
	if w := p.WorldSize(); in.PrevWorldSize > 0 && in.PrevWorldSize != w {
		for i := range p.Processes {
			p.Processes[i].Env["DROVER_WORLD_CHANGED"] = "1"
			p.Processes[i].Env["DROVER_PREV_WORLD_SIZE"] = strconv.Itoa(in.PrevWorldSize)
		}
	}
	if err := checkPlanned(cfg, p, in.HostHome); err != nil {
		return nil, err
	}
	wrapContainers(p, in)
	return p, nil
}

// checkJob finds the job-file mistakes that stop any plan: no command, and
// [job.env] names that are invalid or that drover sets itself.
func checkJob(cfg *config.Config) config.ConfigErrors {
	job := cfg.Job
	var errs config.ConfigErrors
	if len(job.Command) == 0 {
		errs = append(errs, &config.ConfigError{File: cfg.Path, Key: "job.command",
			Msg: "no command", Fix: `set command = ["python3", "train.py"] or similar`})
	}
	for _, name := range sortedKeys(job.Env) {
		switch {
		case !config.ValidEnvName(name):
			errs = append(errs, &config.ConfigError{File: cfg.Path, Key: "job.env." + name,
				Msg: fmt.Sprintf("%q is not a valid environment variable name", name),
				Fix: "use letters, digits and underscores, not starting with a digit"})
		case config.ReservedEnv(job.Framework, name):
			fix := "remove it from [job.env]"
			if name == "CUDA_VISIBLE_DEVICES" {
				fix += "; choose GPUs with gpus = [...] on each [[host]]"
			}
			errs = append(errs, &config.ConfigError{File: cfg.Path, Key: "job.env." + name,
				Msg: fmt.Sprintf("drover sets %s itself for %s jobs", name, job.Framework),
				Fix: fix})
		}
	}
	return errs
}

// placeHosts lists the participating (non-spare) hosts with the GPUs each
// offers, adding them and notes about spares and unprobed hosts to p.
func placeHosts(cfg *config.Config, in PlanInput, p *Plan) []*hostSlots {
	var slots []*hostSlots
	for _, h := range cfg.Hosts {
		if h.Spare {
			p.Notes = append(p.Notes, fmt.Sprintf("%s: spare, not used unless a host stays unreachable", h.Name))
			continue
		}
		hs := &hostSlots{host: h, index: len(slots), addr: hostAddress(h)}
		hs.basePort = in.BasePorts[hs.addr]
		sel, have := in.GPUs[h.Name]
		switch {
		case have && (sel.Probed || len(sel.Indices) > 0):
			hs.gpus = append([]int(nil), sel.Indices...)
			if len(hs.gpus) == 0 && (h.GPUs.Auto || len(h.GPUs.List) > 0) {
				p.Notes = append(p.Notes, fmt.Sprintf("%s: no free GPUs selected; planned as a host without GPUs", h.Name))
			}
		case h.GPUs.Auto:
			hs.unprobed = true
			p.Unprobed = append(p.Unprobed, h.Name)
			p.Notes = append(p.Notes, fmt.Sprintf(`%s: gpus = "auto" not probed; planned as a host without GPUs (run drover plan --probe)`, h.Name))
		default:
			hs.gpus = append([]int(nil), h.GPUs.List...)
		}
		if len(hs.gpus) == 0 {
			hs.cpuSlots = max(cfg.Job.ProcsPerHost, 1)
		}
		p.Hosts = append(p.Hosts, h)
		slots = append(slots, hs)
	}
	return slots
}

// frameworkProcesses places the processes the way the job's framework
// lays them out.
func frameworkProcesses(cfg *config.Config, slots []*hostSlots) ([]Process, error) {
	switch cfg.Job.Framework {
	case config.PyTorch:
		return planPyTorch(cfg.Job, slots), nil
	case config.Torchrun:
		return planTorchrun(cfg, slots)
	case config.TensorFlow:
		return planTensorFlow(cfg, slots)
	case config.JAX:
		return planJAX(cfg, slots)
	}
	return nil, fmt.Errorf("build plan: framework %q has no placer", cfg.Job.Framework)
}

// setEnv completes every process's environment, in order of precedence
// from lowest: drover's common variables, the framework's, the network
// interface, [job.env], then the host's [host.env].
func setEnv(p *Plan, in PlanInput, job config.Job, nHosts int) {
	perHost := map[string]int{}
	for _, pr := range p.Processes {
		perHost[pr.Host.Name]++
	}
	for i := range p.Processes {
		pr := &p.Processes[i]
		pr.Workdir = pr.Host.Workdir
		commonEnv(pr, in)
		switch job.Framework {
		case config.PyTorch:
			torchElasticEnv(pr, in, nHosts, perHost[pr.Host.Name])
		case config.Torchrun:
			// torchrun's own @record forwards its failed worker's error
			// file here (dump_error_file), where drover reads the cause.
			pr.Env["TORCHELASTIC_ERROR_FILE"] = ErrorFile(pr.Workdir, in.HostHome[pr.Host.Name], in.RestartCount, pr.Name())
		}
		if ifc := in.Ifaces[pr.Host.Name]; ifc != "" && job.Framework != config.TensorFlow {
			pr.Env[ncclIfaceEnv] = ifc
			pr.Env[glooIfaceEnv] = ifc
		}
		for k, v := range job.Env {
			pr.Env[k] = v
		}
		for k, v := range pr.Host.Env {
			pr.Env[k] = v
		}
		ncclEnv(pr, in, job)
		stacksEnv(pr, in)
	}
}

// WorldSize is the number of ranks of p: WORLD_SIZE where the framework
// sets it (pytorch, torchrun), else one per process (TensorFlow tasks,
// JAX processes).
func (p *Plan) WorldSize() int {
	if len(p.Processes) > 0 {
		if n, err := strconv.Atoi(p.Processes[0].Env["WORLD_SIZE"]); err == nil {
			return n
		}
	}
	return len(p.Processes)
}

// stacksEnv gives a Python command drover's stack hook (see `drover
// stacks`, package agent's Stacks): DROVER_STACKS_DIR under the workdir's
// .drover, and its hook directory first on PYTHONPATH, before what
// [job.env] or [host.env] put there (the agent appends the login's own
// PYTHONPATH when neither set one). The agent writes the hook there
// (sitecustomize.py, which imports the one it hides).
func stacksEnv(pr *Process, in PlanInput) {
	if !PythonCommand(pr.Command) {
		return
	}
	dir := checkpointDir(pr.Workdir, path.Join(".drover", "stacks"), in.HostHome[pr.Host.Name])
	pr.Env[stacksDirEnv] = dir
	hook := dir + "/hook" // agent.StacksHookDir
	if old := pr.Env["PYTHONPATH"]; old != "" {
		hook += ":" + old
	}
	pr.Env["PYTHONPATH"] = hook
}

// stacksDirEnv is agent.StacksDirEnv.
const stacksDirEnv = "DROVER_STACKS_DIR"

// PythonCommand says whether argv runs Python as far as its words show:
// a word (or a word of a shell's -c string) named python*, torchrun,
// accelerate or deepspeed, or ending in .py.
func PythonCommand(argv []string) bool {
	for _, arg := range argv {
		for _, w := range strings.Fields(arg) {
			b := path.Base(w)
			if strings.HasPrefix(b, "python") || b == "torchrun" || b == "accelerate" || b == "deepspeed" || strings.HasSuffix(b, ".py") {
				return true
			}
		}
	}
	return false
}

// RendezvousAddr is the address every process of p connects to, whose
// route decides the network interface for the collectives (PlanInput.Ifaces):
// MASTER_ADDR (pytorch, torchrun) or the JAX coordinator's host; "" for
// tensorflow, whose tasks connect to each other.
func (p *Plan) RendezvousAddr() string {
	if len(p.Processes) == 0 {
		return ""
	}
	env := p.Processes[0].Env
	if a := env["MASTER_ADDR"]; a != "" {
		return a
	}
	if c := env["JAX_COORDINATOR_ADDRESS"]; c != "" {
		if host, _, err := net.SplitHostPort(c); err == nil {
			return host
		}
	}
	return ""
}

// commonEnv sets what every process gets, whatever the framework.
func commonEnv(pr *Process, in PlanInput) {
	job := in.Config.Job
	env := pr.Env
	env["DROVER_JOB"] = job.Name
	env["DROVER_HOST"] = pr.Host.Name
	env["DROVER_ROLE"] = string(pr.Role)
	env["DROVER_INDEX"] = strconv.Itoa(pr.Index)
	env["DROVER_RESTART_COUNT"] = strconv.Itoa(in.RestartCount)
	env["DROVER_RESUME_FROM"] = in.ResumeFrom
	if p, ok := in.HostResumeFrom[pr.Host.Name]; ok {
		env["DROVER_RESUME_FROM"] = p
	}
	env["DROVER_CHECKPOINT_DIR"] = checkpointDir(pr.Workdir, job.CheckpointDir, in.HostHome[pr.Host.Name])
	runEnv(pr, in)
	dataEnv(env, pr, in)
	env["CUDA_VISIBLE_DEVICES"] = joinInts(pr.Visible)
	// NVML (and so drover's GPU indices) counts in PCI bus order; CUDA
	// by default counts fastest first. Make CUDA count like NVML.
	env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
	// Progress for scripts that print rarely (touching it counts for
	// hang_timeout) and the step drover top shows (a line "step=N").
	env["DROVER_PROGRESS_FILE"] = ProgressFile(pr.Workdir, in.HostHome[pr.Host.Name], pr.Name())
	// A process's stdout is a pipe to the agent, so Python would buffer
	// print() in 8 KiB blocks: lines would reach the logs tens of seconds
	// late, in bursts, and hang_timeout would take a healthy run that
	// prints every second for hung. Kubeflow's PyTorchJob sets it too.
	// [job.env] may set it to "" to turn it off (Python reads an empty
	// value as unset).
	env["PYTHONUNBUFFERED"] = "1"
	if job.HangTimeout > 0 {
		// faulthandler on, so that a hung rank's stack can be asked for.
		env["PYTHONFAULTHANDLER"] = "1"
	}
}

// runEnv sets the run's identity, which outlives restarts and adoption:
// DROVER_RUN_ID and DROVER_ATTEMPT, and with tracker = "wandb" the ids
// that make Weights & Biases continue one run's curves across restarts.
// WANDB_RUN_ID goes to the lead process only (rank 0, node 0, the chief,
// process 0): several processes that init one wandb run id at once
// misbehave; every process gets WANDB_RUN_GROUP.
func runEnv(pr *Process, in PlanInput) {
	if in.RunID == "" {
		return
	}
	env := pr.Env
	env["DROVER_RUN_ID"] = in.RunID
	if in.Attempt > 0 {
		env["DROVER_ATTEMPT"] = strconv.Itoa(in.Attempt)
	}
	if in.Config.Job.Tracker != config.TrackerWandb {
		return
	}
	env["WANDB_RUN_GROUP"] = in.RunID
	if leads(*pr, in.Config) {
		env["WANDB_RUN_ID"] = in.RunID
		env["WANDB_RESUME"] = "allow"
	}
}

// leads says whether pr is the process a tracker's run belongs to: rank 0
// (pytorch), node 0 (torchrun: its rank 0 is among the workers it
// starts), process 0 (jax), the chief or, without one, worker 0
// (tensorflow).
func leads(pr Process, cfg *config.Config) bool {
	switch cfg.Job.Framework {
	case config.TensorFlow:
		if cfg.Job.Roles.Chief > 0 {
			return pr.Role == RoleChief && pr.Index == 0
		}
		return pr.Role == RoleWorker && pr.Index == 0
	default:
		return pr.Index == 0
	}
}

// dataEnv names each [[data]] set's destination on the process's host
// (launcher/stage puts it there): DROVER_DATA_<i> by position and, for a
// named set, DROVER_DATA_<NAME>.
func dataEnv(env map[string]string, pr *Process, in PlanInput) {
	for i, d := range in.Config.Data {
		p := DataDest(pr.Workdir, d.Dest, in.HostHome[pr.Host.Name])
		env[config.DataEnvName(i)] = p
		if n := config.DataNameEnv(d.Name); n != "" {
			env[n] = p
		}
	}
}

// DataDest is where a data set's dest lies on a host: under the workdir
// unless absolute, "~/..." when the home directory is not known. Staging
// (launcher/stage) and the environment use it both.
func DataDest(workdir, dest, home string) string { return checkpointDir(workdir, dest, home) }

// ProgressDir is the directory of DROVER_PROGRESS_FILE on a host: each
// process's agent creates it before the process starts, and drover
// watches the files' mtimes.
func ProgressDir(workdir, home string) string {
	return checkpointDir(workdir, path.Join(".drover", "progress"), home)
}

// ProgressFile is DROVER_PROGRESS_FILE for a process: touching it counts
// as progress for hang_timeout, and its last "step=N" is the step drover
// top shows.
func ProgressFile(workdir, home, name string) string {
	return path.Join(ProgressDir(workdir, home), name)
}

// torchElasticEnv gives a pytorch-mode rank the rest of what torchrun's
// elastic agent gives a worker, with torchrun's values for a static launch
// of one role, so that scripts (and Lightning, which checks
// torch.distributed.is_torchelastic_launched, i.e. TORCHELASTIC_RUN_ID)
// take the same path as under torchrun. hosts is the number of hosts in
// the group, local the number of ranks on this one.
func torchElasticEnv(pr *Process, in PlanInput, hosts, local int) {
	job := in.Config.Job
	env := pr.Env
	env["ROLE_NAME"] = "default" // torchrun's --role default
	env["ROLE_RANK"] = env["RANK"]
	env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"]
	env["GROUP_WORLD_SIZE"] = strconv.Itoa(hosts)
	env["TORCHELASTIC_RESTART_COUNT"] = strconv.Itoa(in.RestartCount)
	env["TORCHELASTIC_MAX_RESTARTS"] = strconv.Itoa(job.MaxRestarts)
	env["TORCHELASTIC_RUN_ID"] = job.Name
	// "True" would make init_process_group connect to an agent's store
	// at MASTER_ADDR:MASTER_PORT as a client; there is no agent, rank 0
	// hosts the store itself.
	env["TORCHELASTIC_USE_AGENT_STORE"] = "False"
	env["TORCHELASTIC_ERROR_FILE"] = ErrorFile(pr.Workdir, in.HostHome[pr.Host.Name], in.RestartCount, pr.Name())
	// NCCL's watchdog turns a collective that fails on one rank into an
	// exception on every rank instead of a hang; torch < 2.2 reads the
	// old name.
	env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
	env["NCCL_ASYNC_ERROR_HANDLING"] = "1"
	if local > 1 {
		// What torchrun does when it starts more than one worker: one
		// OpenMP thread each, rather than every rank taking every core.
		env["OMP_NUM_THREADS"] = "1"
	}
}

// ErrorFile is TORCHELASTIC_ERROR_FILE for a process: where torch's
// @record (torch.distributed.elastic.multiprocessing.errors.record) writes
// the exception that ended it, under the workdir's .drover directory, one
// per attempt. drover reads it back to name a failure's root cause.
func ErrorFile(workdir, home string, attempt int, name string) string {
	return checkpointDir(workdir, path.Join(".drover", "errors", "attempt-"+strconv.Itoa(attempt), name+".json"), home)
}

// planPyTorch starts one process per selected GPU, or ProcsPerHost on a
// host without GPUs; ranks are contiguous per host, hosts in file order.
func planPyTorch(job config.Job, slots []*hostSlots) []Process {
	world := 0
	for _, hs := range slots {
		world += hs.procs()
	}
	masterAddr := slots[0].addr
	var procs []Process
	rank := 0
	for _, hs := range slots {
		n := hs.procs()
		for l := 0; l < n; l++ {
			var gpus []int
			if len(hs.gpus) > 0 {
				gpus = []int{hs.gpus[l]}
			}
			procs = append(procs, Process{
				Host: hs.host, Address: hs.addr, Role: RoleWorker, Index: rank,
				Rank: rank, LocalRank: l, NodeRank: hs.index, GPUs: gpus,
				Visible: append([]int(nil), hs.gpus...),
				Command: append([]string(nil), job.Command...),
				Env: map[string]string{
					"MASTER_ADDR":      masterAddr,
					"MASTER_PORT":      strconv.Itoa(masterPort(job)),
					"WORLD_SIZE":       strconv.Itoa(world),
					"RANK":             strconv.Itoa(rank),
					"LOCAL_RANK":       strconv.Itoa(l),
					"LOCAL_WORLD_SIZE": strconv.Itoa(n),
					"GROUP_RANK":       strconv.Itoa(hs.index),
					"NODE_RANK":        strconv.Itoa(hs.index),
				},
			})
			rank++
		}
	}
	return procs
}

// planTorchrun starts one torchrun per host. A command that starts with a
// Python interpreter becomes `<that python> -m torch.distributed.run ...
// script args`, which is exactly what the torchrun script runs, but with
// the interpreter the job names (a virtualenv's torchrun is rarely on the
// PATH of a non-interactive SSH session). Any other command runs under
// `torchrun --no_python`. The flags use the underscore spelling, which
// every torch release since 1.10 accepts.
func planTorchrun(cfg *config.Config, slots []*hostSlots) ([]Process, error) {
	job := cfg.Job
	prefix, rest, err := torchrunSplit(job.Command)
	if err != nil {
		return nil, &config.ConfigError{File: cfg.Path, Key: "job.command", Msg: err.Error(),
			Fix: "torchrun starts the script with its own interpreter flags; set interpreter options through [job.env] (e.g. PYTHONUNBUFFERED = \"1\" for -u)"}
	}
	var procs []Process
	for _, hs := range slots {
		argv := append([]string(nil), prefix...)
		argv = append(argv,
			"--nnodes", strconv.Itoa(len(slots)),
			"--node_rank", strconv.Itoa(hs.index),
			"--nproc_per_node", strconv.Itoa(hs.procs()),
			"--master_addr", slots[0].addr,
			"--master_port", strconv.Itoa(masterPort(job)),
			// TORCHELASTIC_RUN_ID in the workers: the job, as in
			// pytorch mode (torchrun's own default is "none").
			"--rdzv_id", job.Name,
			// torch 1.13 on Python 3.11 (Debian bookworm) crashes in
			// torchrun's log setup unless worker stderr is redirected;
			// --tee keeps it on the console, where drover reads it.
			"--redirects", "2", "--tee", "2",
		)
		argv = append(argv, rest...)
		procs = append(procs, Process{
			Host: hs.host, Address: hs.addr, Role: RoleNode, Index: hs.index,
			Rank: -1, LocalRank: -1, NodeRank: hs.index,
			GPUs:    append([]int(nil), hs.gpus...),
			Visible: append([]int(nil), hs.gpus...),
			Command: argv,
			Env: map[string]string{
				"MASTER_ADDR": slots[0].addr,
				"MASTER_PORT": strconv.Itoa(masterPort(job)),
				"NODE_RANK":   strconv.Itoa(hs.index),
				"GROUP_RANK":  strconv.Itoa(hs.index),
			},
		})
	}
	return procs, nil
}

// torchrunSplit turns the job command into the launcher prefix (up to and
// including the torchrun program) and what follows torchrun's own flags.
func torchrunSplit(cmd []string) (prefix, rest []string, err error) {
	if !isPython(cmd[0]) {
		return []string{"torchrun"}, append([]string{"--no_python"}, cmd...), nil
	}
	prefix = []string{cmd[0]}
	i := 1
	for ; i < len(cmd); i++ {
		a := cmd[i]
		switch {
		case a == "-m":
			if i+1 >= len(cmd) {
				return nil, nil, errors.New("python -m without a module name")
			}
			prefix = append(prefix, "-m", "torch.distributed.run")
			return prefix, append([]string{"-m"}, cmd[i+1:]...), nil
		case a == "-c":
			return nil, nil, errors.New("python -c cannot run under torchrun; put the code in a script")
		case a == "-X" || a == "-W":
			if i+1 >= len(cmd) {
				return nil, nil, fmt.Errorf("python %s without a value", a)
			}
			prefix = append(prefix, a, cmd[i+1])
			i++
		case strings.HasPrefix(a, "-") && a != "-":
			prefix = append(prefix, a)
		default:
			prefix = append(prefix, "-m", "torch.distributed.run")
			return prefix, append([]string(nil), cmd[i:]...), nil
		}
	}
	return nil, nil, errors.New("python command without a script")
}

// isPython reports whether argv[0] names a Python interpreter (python,
// python3, python3.11, /venv/bin/python, ...).
func isPython(arg0 string) bool {
	base := path.Base(arg0)
	if !strings.HasPrefix(base, "python") {
		return false
	}
	for _, r := range strings.TrimPrefix(base, "python") {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return true
}

// checkLocalMix refuses plans where a process on a remote host would have
// to reach a local host: 127.0.0.1 there is the remote host itself.
func checkLocalMix(cfg *config.Config, p *Plan, slots []*hostSlots) error {
	var local, remote []string
	for _, hs := range slots {
		if isLocal(hs.host) {
			local = append(local, hs.host.Name)
		} else {
			remote = append(remote, hs.host.Name)
		}
	}
	if len(local) == 0 || len(remote) == 0 {
		return nil
	}
	var endpoint string
	switch p.Framework {
	case config.PyTorch, config.Torchrun:
		if isLocal(slots[0].host) {
			endpoint = "rank 0 (MASTER_ADDR)"
		}
	case config.TensorFlow:
		if len(p.Processes) > 1 {
			for _, pr := range p.Processes {
				if isLocal(pr.Host) {
					endpoint = pr.Name() + " (in TF_CONFIG)"
					break
				}
			}
		}
	}
	if endpoint == "" {
		return nil
	}
	file := cfg.InventoryPath
	if file == "" {
		file = cfg.Path
	}
	return &config.ConfigError{File: file, Key: "host",
		Msg: fmt.Sprintf("%s runs on local host %s, which remote hosts %s cannot reach at %s",
			endpoint, local[0], strings.Join(remote, ", "), localAddress),
		Fix: "use only local hosts, or give this machine an SSH [[host]] entry with a reachable address"}
}

func isLocal(h config.Host) bool {
	return h.Transport == config.TransportLocal || h.Address == "local"
}

// hostAddress is how other processes reach h.
// HostAddress is how other hosts reach h on the job's network: the
// address MASTER_ADDR and the collective use (127.0.0.1 for a local host).
// Direct checkpoint copies listen there too.
func HostAddress(h config.Host) string { return hostAddress(h) }

func hostAddress(h config.Host) string {
	if isLocal(h) || h.Address == "" {
		return localAddress
	}
	return h.Address
}

// joinHostPort writes address:port, bracketing IPv6 literals.
func joinHostPort(addr string, port int) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + strconv.Itoa(port)
	}
	return addr + ":" + strconv.Itoa(port)
}

func (hs *hostSlots) procs() int {
	if len(hs.gpus) > 0 {
		return len(hs.gpus)
	}
	return hs.cpuSlots
}

func masterPort(job config.Job) int {
	if job.MasterPort > 0 {
		return job.MasterPort
	}
	return defaultMasterPort
}

// homeRelative strips a leading "~/" (or a lone "~"), which means the same
// as a relative path: relative to the login user's home.
func homeRelative(p string) string {
	if p == "~" {
		return ""
	}
	return strings.TrimPrefix(p, "~/")
}

// checkpointDir is DROVER_CHECKPOINT_DIR: checkpoint_dir under the
// workdir unless absolute, under the home directory unless absolute, in
// "~/..." form when the home directory is not known.
func checkpointDir(workdir, ckpt, home string) string {
	var p string
	switch {
	case path.IsAbs(ckpt):
		return path.Clean(ckpt)
	case ckpt == "~" || strings.HasPrefix(ckpt, "~/"):
		p = homeRelative(ckpt)
	default:
		if path.IsAbs(workdir) {
			return path.Join(workdir, ckpt)
		}
		p = path.Join(homeRelative(workdir), ckpt)
	}
	if home != "" {
		return path.Join(home, p)
	}
	if p == "." || p == "" {
		return "~"
	}
	return "~/" + p
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func copyEnv(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
