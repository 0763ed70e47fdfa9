package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// jobReader reads the [job] table: what the job is (name, framework,
// command), its code directory, how its processes are laid out, how it
// restarts and recovers, its GPU health gate, links and roles. Where its
// files go on the hosts is filesReader's.
type jobReader struct{ *walker }

// job reads the [job] table and applies defaults.
func (w jobReader) job(top tbl, dir string) Job {
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
	filesReader{w.walker}.jobFiles(t, &j, dir)
	w.jobLayout(t, &j)
	w.jobRestarts(t, &j)
	if n, ok := w.count(t, "gpu_max_used_mib"); ok {
		j.GPUMaxUsedMiB = n
	}
	if n, ok := w.integer(t, "min_gpus", 0, 1024, "between 0 and 1024"); ok {
		j.MinGPUs = n
	}
	if n, ok := w.integer(t, "gpus_per_host", 1, 1024, "between 1 and 1024"); ok {
		j.GPUsPerHost = n
	}
	w.network(t, &j)
	setupReader{w.walker}.read(t, &j)
	containerReader{w.walker}.read(t, &j)
	notifyReader{w.walker}.notifications(t, &j, dir)
	stragglerReader{w.walker}.read(t, &j)
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
		SetupTimeout:      DefaultSetupTimeout,
		GPUMaxUsedMiB:     DefaultGPUMaxUsedMiB,

		MaxRestartsWithoutProgress: DefaultMaxRestartsWithoutProgress,
		Health:                     DefaultHealth,
		IgnoreXIDs:                 slices.Clone(DefaultIgnoreXIDs),
		WebhookFormat:              WebhookJSON,
		Straggler:                  Straggler{Factor: DefaultStragglerFactor, ClockFactor: DefaultStragglerClockFactor, On: StragglerWarn},
	}
}

// jobIdentity reads what the job is: name, framework and command.
func (w jobReader) jobIdentity(t tbl, j *Job) {
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
func (w jobReader) jobCode(t tbl, j *Job, dir string) {
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

// jobLayout reads how processes are laid out: processes per host, ports
// and the environment.
func (w jobReader) jobLayout(t tbl, j *Job) {
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
func (w jobReader) jobRestarts(t tbl, j *Job) {
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
func (w jobReader) recovery(t tbl, j *Job) {
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
	if n, ok := w.integer(t, "min_hosts", 1, 1<<20, "at least 1"); ok {
		j.MinHosts = n
	}
	if s, ok := w.enum(t, "regrow", string(RegrowRestart), string(RegrowCheckpoint)); ok {
		j.Regrow = Regrow(s)
	}
	if n, ok := w.count(t, "max_restarts_without_progress"); ok {
		j.MaxRestartsWithoutProgress = n
	}
	w.health(t, j)
}

// health reads the GPU health gate's keys.
func (w jobReader) health(t tbl, j *Job) {
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

// command reads job.command, which must be a non-empty array of strings.
func (w jobReader) command(t tbl) []string {
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

// roles reads [job.roles], which only a tensorflow job may have.
func (w jobReader) roles(jt tbl, fw Framework) Roles {
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
