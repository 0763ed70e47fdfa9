package plan

import (
	"hash/fnv"
	"net"
	"path"
	"strconv"

	"github.com/droverhq/drover/cluster/config"
)

// NCCL's and PyTorch's own diagnostics of a hung group (docs/triage.md),
// for the processes that use NCCL: NCCL's RAS service on a port of the
// job's own, which drover asks when hang_timeout fires, and PyTorch's
// flight recorder, whose dump files drover gathers after a hang or a
// failure.
//
// drover cannot see a process's backend before it runs, so it decides
// from the plan: a pytorch, torchrun or jax process with a GPU uses NCCL
// (the backend those frameworks pick on GPUs), and so does any process
// whose [job.env] or [host.env] sets NCCL_RAS_ENABLE (the job says it
// uses NCCL's RAS: the way to get the address on hosts without GPUs, or a
// backend drover does not guess). NCCL_RAS_ENABLE itself is left as the
// job gives it or to NCCL's default (on). A value the job sets for any of
// these variables wins.
const (
	RASAddrEnv      = "NCCL_RAS_ADDR"
	rasEnableEnv    = "NCCL_RAS_ENABLE"
	traceBufferEnv  = "TORCH_NCCL_TRACE_BUFFER_SIZE"
	dumpOnTimeout   = "TORCH_NCCL_DUMP_ON_TIMEOUT"
	FlightRecEnv    = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
	traceBufferSize = "2000"
)

// RAS ports: NCCL's default is 28028 for every job on a host, and two
// jobs on one host would share one service (NCCL's docs ask separate jobs
// for separate sockets). drover gives each job its own port in
// [rasPortBase, rasPortBase+rasPorts), below Linux's ephemeral range
// (32768 and up), from a hash of the job's name and workdir on the host:
// stable across restarts and runs (drover plan shows the port drover run
// uses), and two jobs on a host collide with odds of 1 in 4000.
const (
	rasPortBase = 28100
	rasPorts    = 4000
)

// RASPort is the port of a job's RAS service on a host whose workdir is
// workdir: the next one when that is the job's own master_port (the
// default, 29500, is in the range), which rank 0's host listens on too.
func RASPort(job, workdir string, masterPort int) int {
	h := fnv.New32a()
	h.Write([]byte(job))
	h.Write([]byte{0})
	h.Write([]byte(workdir))
	p := rasPortBase + int(h.Sum32()%rasPorts)
	if p == masterPort {
		p = rasPortBase + (p-rasPortBase+1)%rasPorts
	}
	return p
}

// usesNCCL says whether pr uses NCCL as far as the plan can tell (see
// above); env is its environment with [job.env] and [host.env] in.
func usesNCCL(pr *Process, f config.Framework) bool {
	if _, set := pr.Env[rasEnableEnv]; set {
		return true
	}
	switch f {
	case config.PyTorch, config.Torchrun, config.JAX:
		return len(pr.Visible) > 0
	}
	return false
}

// ncclEnv sets, for a process that uses NCCL, NCCL_RAS_ADDR on 127.0.0.1
// at the job's port (not when NCCL_RAS_ENABLE is "0") and, for PyTorch,
// the flight recorder: a trace buffer, a dump when NCCL's watchdog times
// out, into FlightRecorderPrefix (torch appends the global rank). Each
// only where the job did not set it. job is the plan's (its master_port
// the one this attempt uses).
func ncclEnv(pr *Process, in PlanInput, job config.Job) {
	if !usesNCCL(pr, job.Framework) {
		return
	}
	setDefault := func(k, v string) {
		if _, set := pr.Env[k]; !set {
			pr.Env[k] = v
		}
	}
	if pr.Env[rasEnableEnv] != "0" {
		setDefault(RASAddrEnv, net.JoinHostPort("127.0.0.1", strconv.Itoa(RASPort(job.Name, pr.Workdir, masterPort(job)))))
	}
	if job.Framework != config.PyTorch && job.Framework != config.Torchrun {
		return
	}
	setDefault(traceBufferEnv, traceBufferSize)
	setDefault(dumpOnTimeout, "1")
	setDefault(FlightRecEnv, FlightRecorderPrefix(pr.Workdir, in.HostHome[pr.Host.Name], in.RestartCount))
}

// FlightRecorderPrefix is TORCH_NCCL_DEBUG_INFO_TEMP_FILE for an attempt
// (counted from 0, as DROVER_RESTART_COUNT) on a host: the flight
// recorder writes rank R's dump to this prefix followed by R. The agent
// makes its directory before the command starts.
func FlightRecorderPrefix(workdir, home string, restartCount int) string {
	return checkpointDir(workdir, path.Join(".drover", "flightrec", "attempt-"+strconv.Itoa(restartCount), "rank-"), home)
}

// RankFile is one rank's file on its host.
type RankFile struct {
	Host string // config.Host.Name
	Rank int
	Path string
}

// FlightRecorderFiles are the files the flight recorder of p's ranks
// would write (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, drover's or the job's,
// followed by the global rank), for the processes that have one. A
// torchrun process's ranks are its host's share, contiguous, hosts in
// order.
func (p *Plan) FlightRecorderFiles() []RankFile {
	var out []RankFile
	next := 0 // torchrun: the first rank of the next node
	for _, pr := range p.Processes {
		ranks := []int{pr.Rank}
		if pr.Role == RoleNode {
			n := nprocPerNode(pr.Command)
			ranks = ranks[:0]
			for i := range n {
				ranks = append(ranks, next+i)
			}
			next += n
		}
		prefix := pr.Env[FlightRecEnv]
		if prefix == "" {
			continue
		}
		for _, r := range ranks {
			if r >= 0 {
				out = append(out, RankFile{Host: pr.Host.Name, Rank: r, Path: prefix + strconv.Itoa(r)})
			}
		}
	}
	return out
}

// nprocPerNode is the --nproc_per_node planTorchrun gave a torchrun.
func nprocPerNode(argv []string) int {
	for i, a := range argv {
		if a == "--nproc_per_node" && i+1 < len(argv) {
			if n, err := strconv.Atoi(argv[i+1]); err == nil {
				return n
			}
		}
	}
	return 1
}
