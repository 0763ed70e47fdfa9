package plan

import (
	"encoding/json"
	"fmt"

	"github.com/droverhq/drover/cluster/config"
)

// tfSlot is a place for one TensorFlow task: a GPU, or a CPU slot (gpu -1).
type tfSlot struct {
	hs  *hostSlots
	gpu int
}

// tfTask is one placed TensorFlow task.
type tfTask struct {
	role  Role
	index int
	hs    *hostSlots
	gpu   int // -1: none
}

// tfPool is every slot the participating hosts offer.
type tfPool struct {
	gpu, cpu []tfSlot
	cpuHosts []*hostSlots // hosts with CPU slots, in host order
	msg      string       // the pool in words, for errors
}

// tfCounts is how many workers to place and how many ps/evaluator tasks get
// a CPU slot of their own.
type tfCounts struct {
	worker, lightOnCPU int
}

// planTensorFlow places chief, workers, ps and evaluator tasks.
//
// Every participating host offers slots: one per selected GPU, or
// procs_per_host on a host without GPUs. Chief and workers take one slot
// each, GPU slots first in host order, then CPU slots. ps and evaluator
// tasks need no GPU: they take CPU slots that chief and workers can spare
// (spread over hosts without GPUs), and any beyond that run beside the
// other tasks, without a GPU, on the host with the fewest tasks (hosts
// without GPUs first). worker = "auto" is one worker per slot left after
// the chief and the ps/evaluator CPU slots.
func planTensorFlow(cfg *config.Config, slots []*hostSlots) ([]Process, error) {
	if err := checkRoles(cfg); err != nil {
		return nil, err
	}
	pool := newTFPool(cfg.Job, slots)
	n, err := countTasks(cfg, pool)
	if err != nil {
		return nil, err
	}
	tasks := placeTasks(cfg.Job.Roles, slots, pool, n)
	return tfProcesses(cfg.Job, tasks)
}

// checkRoles refuses role counts TensorFlow cannot run.
func checkRoles(cfg *config.Config) error {
	r := cfg.Job.Roles
	if r.Chief < 0 || r.Worker < 0 || r.PS < 0 || r.Evaluator < 0 {
		return &config.ConfigError{File: cfg.Path, Key: "job.roles", Msg: "role counts cannot be negative"}
	}
	if r.Chief > 1 {
		return &config.ConfigError{File: cfg.Path, Key: "job.roles.chief",
			Msg: fmt.Sprintf("%d chiefs; TensorFlow allows one", r.Chief), Fix: "set chief = 1 (or 0 to let worker 0 lead)"}
	}
	return nil
}

// newTFPool lists the GPU slots, then the CPU slots, in host order.
func newTFPool(job config.Job, slots []*hostSlots) tfPool {
	var p tfPool
	for _, hs := range slots {
		for _, g := range hs.gpus {
			p.gpu = append(p.gpu, tfSlot{hs, g})
		}
	}
	for _, hs := range slots {
		for k := 0; k < hs.cpuSlots; k++ {
			p.cpu = append(p.cpu, tfSlot{hs, -1})
		}
		if hs.cpuSlots > 0 {
			p.cpuHosts = append(p.cpuHosts, hs)
		}
	}
	p.msg = fmt.Sprintf("the fleet has %d slots: %d GPUs and %d CPU slots (procs_per_host = %d on %d hosts without GPUs)",
		len(p.gpu)+len(p.cpu), len(p.gpu), len(p.cpu), max(job.ProcsPerHost, 1), len(p.cpuHosts))
	return p
}

// countTasks decides the number of workers (worker = "auto" or as set) and
// how many ps/evaluator tasks take CPU slots, refusing a job that does not
// fit.
func countTasks(cfg *config.Config, pool tfPool) (tfCounts, error) {
	r := cfg.Job.Roles
	total := len(pool.gpu) + len(pool.cpu)
	light := r.PS + r.Evaluator
	var n tfCounts
	if r.WorkerAuto {
		// Leave at least one worker slot (or the chief's) for the
		// heavy tasks before ps/evaluator take CPU slots.
		n.lightOnCPU = min(light, len(pool.cpu), max(total-r.Chief-1, 0))
		n.worker = total - n.lightOnCPU - r.Chief
	} else {
		n.worker = r.Worker
		need := r.Chief + n.worker
		if need > total {
			return n, &config.ConfigError{File: cfg.Path, Key: "job.roles",
				Msg: fmt.Sprintf("chief = %d and worker = %d need %d slots but %s", r.Chief, n.worker, need, pool.msg),
				Fix: fmt.Sprintf(`lower worker to %d or use worker = "auto", or add GPUs/hosts or raise procs_per_host`, max(total-r.Chief, 0))}
		}
		n.lightOnCPU = min(light, len(pool.cpu), total-need)
	}
	if r.Chief+n.worker == 0 {
		return n, &config.ConfigError{File: cfg.Path, Key: "job.roles",
			Msg: "no chief and no worker to place; " + pool.msg,
			Fix: "set chief = 1 or worker >= 1, and make sure hosts have GPUs or procs_per_host >= 1"}
	}
	return n, nil
}

// splitSlots sets aside lightOnCPU CPU slots for ps/evaluator tasks,
// round-robin over CPU hosts from each host's last slot (so parameter
// servers spread out), and returns them with the slots left for chief and
// workers: GPU slots first, then CPU slots in host order.
func splitSlots(pool tfPool, lightOnCPU int) (light, heavy []tfSlot) {
	light = make([]tfSlot, 0, lightOnCPU)
	taken := map[*hostSlots]int{}
	for len(light) < lightOnCPU {
		for _, hs := range pool.cpuHosts {
			if len(light) == lightOnCPU {
				break
			}
			if taken[hs] < hs.cpuSlots {
				taken[hs]++
				light = append(light, tfSlot{hs, -1})
			}
		}
	}
	heavy = append([]tfSlot(nil), pool.gpu...)
	used := map[*hostSlots]int{}
	for _, s := range pool.cpu {
		if used[s.hs] < s.hs.cpuSlots-taken[s.hs] {
			used[s.hs]++
			heavy = append(heavy, s)
		}
	}
	return light, heavy
}

// placeTasks gives chief and workers the heavy slots in order, then ps and
// evaluator tasks their CPU slots, or the least loaded host once those run
// out.
func placeTasks(r config.Roles, slots []*hostSlots, pool tfPool, n tfCounts) []tfTask {
	lightSlots, heavySlots := splitSlots(pool, n.lightOnCPU)
	load := map[*hostSlots]int{}
	var tasks []tfTask
	next := 0
	place := func(role Role, count int) {
		for i := 0; i < count; i++ {
			s := heavySlots[next]
			next++
			load[s.hs]++
			tasks = append(tasks, tfTask{role, i, s.hs, s.gpu})
		}
	}
	place(RoleChief, r.Chief)
	place(RoleWorker, n.worker)
	lightNext := 0
	placeLight := func(role Role, count int) {
		for i := 0; i < count; i++ {
			var hs *hostSlots
			if lightNext < len(lightSlots) {
				hs = lightSlots[lightNext].hs
				lightNext++
			} else {
				hs = leastLoaded(slots, load)
			}
			load[hs]++
			tasks = append(tasks, tfTask{role, i, hs, -1})
		}
	}
	placeLight(RolePS, r.PS)
	placeLight(RoleEvaluator, r.Evaluator)
	return tasks
}

// tfPorts gives each task its port: base_port on each address, +1 per task
// there, in task order. Keyed by address, not host, so local hosts sharing
// 127.0.0.1 get distinct ports. It returns the ports and the cluster spec.
func tfPorts(job config.Job, tasks []tfTask) ([]int, map[string][]string) {
	nextPort := map[string]int{}
	bp := job.BasePort
	if bp <= 0 {
		bp = defaultBasePort
	}
	ports := make([]int, len(tasks))
	clusterSpec := map[string][]string{}
	for i, t := range tasks {
		port, ok := nextPort[t.hs.addr]
		if !ok {
			port = bp
			if t.hs.basePort > 0 {
				port = t.hs.basePort
			}
		}
		nextPort[t.hs.addr] = port + 1
		ports[i] = port
		clusterSpec[string(t.role)] = append(clusterSpec[string(t.role)], joinHostPort(t.hs.addr, port))
	}
	return ports, clusterSpec
}

// tfProcesses turns placed tasks into processes with their TF_CONFIG (none
// for a single task, which TensorFlow runs without a cluster).
func tfProcesses(job config.Job, tasks []tfTask) ([]Process, error) {
	ports, clusterSpec := tfPorts(job, tasks)
	procs := make([]Process, 0, len(tasks))
	for i, t := range tasks {
		env := map[string]string{}
		if len(tasks) > 1 {
			tc, err := TFConfigJSON(clusterSpec, string(t.role), t.index)
			if err != nil {
				return nil, fmt.Errorf("build TF_CONFIG for %s-%d: %w", t.role, t.index, err)
			}
			env["TF_CONFIG"] = tc
		}
		var gpus []int
		if t.gpu >= 0 {
			gpus = []int{t.gpu}
		}
		procs = append(procs, Process{
			Host: t.hs.host, Address: t.hs.addr, Role: t.role, Index: t.index,
			Rank: -1, LocalRank: -1, NodeRank: -1, GPUs: gpus, Visible: gpus, Port: ports[i],
			Command: append([]string(nil), job.Command...), Env: env,
		})
	}
	return procs, nil
}

// leastLoaded picks the host for a ps/evaluator task that has no CPU slot:
// hosts without GPUs first, then the fewest tasks, then file order.
func leastLoaded(slots []*hostSlots, load map[*hostSlots]int) *hostSlots {
	var best *hostSlots
	for _, hs := range slots {
		if best == nil {
			best = hs
			continue
		}
		bCPU, hCPU := len(best.gpus) == 0, len(hs.gpus) == 0
		if hCPU != bCPU {
			if hCPU {
				best = hs
			}
			continue
		}
		if load[hs] < load[best] {
			best = hs
		}
	}
	return best
}

// TFConfig is the TF_CONFIG document, field for field as Kubeflow's TFJob
// operator writes it: lower-case replica types mapping to "address:port"
// lists, the task's type and index, and environment "cloud" (which TF <=
// 1.3 needs and later versions ignore).
type TFConfig struct {
	Cluster     map[string][]string `json:"cluster"`
	Task        TFTask              `json:"task"`
	Environment string              `json:"environment"`
}

// TFTask is the "task" member of TF_CONFIG.
type TFTask struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// TFConfigJSON renders TF_CONFIG for one task. Roles with no tasks are
// absent from the cluster; keys come out sorted, as Go's encoding/json (and
// so the TFJob operator) writes them.
func TFConfigJSON(clusterSpec map[string][]string, role string, index int) (string, error) {
	b, err := json.Marshal(TFConfig{
		Cluster:     clusterSpec,
		Task:        TFTask{Type: role, Index: index},
		Environment: "cloud",
	})
	return string(b), err
}
