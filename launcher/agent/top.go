package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/gpu"
)

// TopSample is one reading of a host for `drover top`: its GPUs and the
// job's processes on it. `drover agent top` prints one per line, as JSON,
// every interval while its stdin stays open; its JSON form is a contract
// between drover versions on either side of an SSH connection (fields may
// be added, never renamed).
type TopSample struct {
	// Time is the host's clock when the sample was read.
	Time time.Time `json:"time"`
	GPUs []TopGPU  `json:"gpus"`
	// GPUError says why GPUs could not be read ("" when they were).
	GPUError string    `json:"gpu_error,omitempty"`
	Procs    []TopProc `json:"procs"`
	// Health holds the health findings of GPUs not in GPUs (a lost one),
	// see addHealth.
	Health []TopFinding `json:"health,omitempty"`
}

// TopGPU is one GPU as nvidia-smi reports it. A nil pointer is a value
// the GPU did not report ("[N/A]").
type TopGPU struct {
	Index       int      `json:"index"`
	UUID        string   `json:"uuid,omitempty"`
	UtilPct     *float64 `json:"utilization_pct,omitempty"`
	MemUsedMiB  *float64 `json:"memory_used_mib,omitempty"`
	MemTotalMiB *float64 `json:"memory_total_mib,omitempty"`
	TempC       *float64 `json:"temperature_c,omitempty"`
	PowerW      *float64 `json:"power_w,omitempty"`
	// Throttle is the clock event (throttle) reasons bitmask.
	Throttle *uint64 `json:"throttle_reasons,omitempty"`
	// ECCVolatile counts uncorrectable ECC errors since the driver loaded.
	ECCVolatile *float64 `json:"ecc_uncorrected_volatile,omitempty"`
	// SMClockMHz and SMClockMaxMHz are its SM clock now and at most
	// (clocks.sm, clocks.max.sm): a throttled GPU runs far below its
	// peers' clock, which the run's straggler watch compares.
	SMClockMHz    *float64 `json:"sm_clock_mhz,omitempty"`
	SMClockMaxMHz *float64 `json:"sm_clock_max_mhz,omitempty"`
	// PIDs are the compute processes on the GPU.
	PIDs []int `json:"pids,omitempty"`
	// Health holds what the run's health watch found on this GPU (see
	// addHealth); nothing while no job runs.
	Health []TopFinding `json:"health,omitempty"`
}

// TopProc is one process of the job on this host, found by the pidfile
// its `drover agent run` keeps (workdir/.drover/pids/NAME.pid).
type TopProc struct {
	// Name is the plan's process name ("worker-3").
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	// State is "running", "sleeping", "disk-wait", "stopped", "zombie" or
	// "gone" (the pidfile stayed, the process did not).
	State   string    `json:"state"`
	Started time.Time `json:"started"`
	// OutputAgeS is the seconds since its log last grew, -1 without a log.
	OutputAgeS float64 `json:"output_age_s"`
	// Step is the last step=N in its DROVER_PROGRESS_FILE; StepRate the
	// steps per second between the last two steps this agent saw.
	Step     *int64   `json:"step,omitempty"`
	StepRate *float64 `json:"step_rate,omitempty"`
	// GPUs are the indices of the GPUs its process group uses.
	GPUs []int `json:"gpus,omitempty"`
	// CPUSeconds is the user and system CPU time every live process of
	// its process group has used (/proc/PID/stat), which the run's
	// straggler watch divides by the steps between two samples.
	CPUSeconds *float64 `json:"cpu_seconds,omitempty"`
}

// TopOptions are `drover agent top`'s flags.
type TopOptions struct {
	// Workdir is the job's workdir on this host (relative to home).
	Workdir string
	// Every is the time between samples; 0 prints one and exits.
	Every time.Duration
	// Heartbeat, when positive, stops the samples when stdin has been
	// silent this long: drover writes a newline every Every, so a
	// controller cut off from the host (whose sshd may not notice for
	// hours) leaves no sampler behind.
	Heartbeat time.Duration
}

// TopCommand returns the argv of `drover agent top`.
func TopCommand(binary string, o TopOptions) []string {
	argv := []string{binary, cmdAgent, cmdTop, "--" + flagWorkdir, o.Workdir}
	if o.Every > 0 {
		argv = append(argv, "--"+flagEvery, o.Every.String())
	}
	if o.Heartbeat > 0 {
		argv = append(argv, "--"+flagHeartbeat, o.Heartbeat.String())
	}
	return argv
}

// smiQueryGPU is what top asks nvidia-smi per GPU, in this order.
const smiQueryGPU = "index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total"

// topper keeps what one sample needs from the last: each process's last
// step and when it was seen to change, for the step rate.
type topper struct {
	workdir string
	steps   map[string]stepSeen
}

type stepSeen struct {
	step int64
	at   time.Time
	rate *float64
}

// Top prints a TopSample to w every o.Every until ctx ends or stdin
// (when not nil) reaches its end: the controller holds the session open
// for as long as it watches, and its going away ends the loop.
func Top(ctx context.Context, o TopOptions, stdin io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if stdin != nil && o.Every > 0 {
		go watchStdin(ctx, stdin, o.Heartbeat, cancel)
	}
	t := &topper{workdir: o.Workdir, steps: map[string]stepSeen{}}
	enc := json.NewEncoder(w)
	for {
		s := t.sample(ctx)
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("agent top: write sample: %w", err)
		}
		if o.Every <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Every):
		}
	}
}

// watchStdin calls cancel when stdin ends, or, with a heartbeat, when
// nothing arrived on it for that long.
func watchStdin(ctx context.Context, stdin io.Reader, heartbeat time.Duration, cancel func()) {
	got := make(chan struct{}, 1)
	go func() {
		defer cancel()
		buf := make([]byte, 512)
		for {
			if _, err := stdin.Read(buf); err != nil {
				return
			}
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}()
	if heartbeat <= 0 {
		return
	}
	timer := time.NewTimer(heartbeat)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-got:
			timer.Reset(heartbeat)
		case <-timer.C:
			cancel()
			return
		}
	}
}

func (t *topper) sample(ctx context.Context) TopSample {
	s := TopSample{Time: time.Now(), GPUs: []TopGPU{}, Procs: []TopProc{}}
	gpus, err := smiGPUs(ctx)
	if err != nil {
		s.GPUError = err.Error()
	}
	s.GPUs = append(s.GPUs, gpus...)
	s.Procs = append(s.Procs, t.procs(s.Time)...)
	byGroup := map[int][]int{}
	for _, g := range s.GPUs {
		for _, pid := range g.PIDs {
			if pg := procGroup(pid); pg > 0 {
				byGroup[pg] = append(byGroup[pg], g.Index)
			}
		}
	}
	for i, p := range s.Procs {
		s.Procs[i].GPUs = uniqueInts(byGroup[p.Pid])
	}
	t.addHealth(&s)
	return s
}

// smiGPUs reads the GPUs and their compute processes through nvidia-smi,
// which every NVIDIA driver installs.
func smiGPUs(ctx context.Context) ([]TopGPU, error) {
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		return nil, errors.New("no nvidia-smi on this host's PATH (no NVIDIA driver)")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu="+smiQueryGPU, "--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi --query-gpu: %w", smiErr(err))
	}
	gpus, err := ParseTopGPUs(out)
	if err != nil {
		return nil, err
	}
	smiClocks(ctx, gpus)
	apps, err := exec.CommandContext(ctx, "nvidia-smi", "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return gpus, fmt.Errorf("nvidia-smi --query-compute-apps: %w", smiErr(err))
	}
	for _, line := range strings.Split(string(apps), "\n") {
		uuid, pidS, ok := strings.Cut(line, ",")
		pid, err := strconv.Atoi(strings.TrimSpace(pidS))
		if !ok || err != nil {
			continue
		}
		for i := range gpus {
			if gpus[i].UUID == strings.TrimSpace(uuid) {
				gpus[i].PIDs = append(gpus[i].PIDs, pid)
			}
		}
	}
	return gpus, nil
}

// smiQueryClocks is the SM clocks, asked apart from smiQueryGPU so that
// an nvidia-smi that cannot tell them (an old driver, a stand-in) costs
// the clocks alone.
const smiQueryClocks = "index,clocks.sm,clocks.max.sm"

// smiClocks adds each GPU's SM clocks to gpus; a failed query leaves
// them unknown (nil).
func smiClocks(ctx context.Context, gpus []TopGPU) {
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu="+smiQueryClocks, "--format=csv,noheader,nounits").Output()
	if err != nil {
		return
	}
	for n, line := range gpu.SMILines(out) {
		idx, f, err := gpu.SMIRecord(n+1, line, smiQueryClocks, 3)
		if err != nil {
			return
		}
		for i := range gpus {
			if gpus[i].Index == idx {
				gpus[i].SMClockMHz, gpus[i].SMClockMaxMHz = num(f[1]), num(f[2])
			}
		}
	}
}

// smiErr adds nvidia-smi's own message to a failed run's error.
func smiErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// ParseTopGPUs parses nvidia-smi's CSV for smiQueryGPU (noheader,
// nounits): "[N/A]" and "[Not Supported]" become nil values.
func ParseTopGPUs(out []byte) ([]TopGPU, error) {
	var gpus []TopGPU
	for n, line := range gpu.SMILines(out) {
		idx, f, err := gpu.SMIRecord(n+1, line, smiQueryGPU, 9)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, TopGPU{Index: idx, UUID: f[1], UtilPct: num(f[2]), MemUsedMiB: num(f[3]), MemTotalMiB: num(f[4]),
			TempC: num(f[5]), PowerW: num(f[6]), Throttle: gpu.SMIUint(f[7]), ECCVolatile: num(f[8])})
	}
	return gpus, nil
}

// num is a CSV field as a number, nil when nvidia-smi did not report it.
func num(s string) *float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil
	}
	return &v
}

// procs reads the job's pidfiles, and each process's log and progress
// file.
func (t *topper) procs(now time.Time) []TopProc {
	if t.workdir == "" {
		return nil // an inventory without a job: GPUs only
	}
	dir := filepath.Join(t.workdir, ".drover", "pids")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []TopProc
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		pf, err := readPidfile(filepath.Join(dir, e.Name()))
		if err != nil || pf == nil {
			continue
		}
		p := TopProc{Name: name, Pid: pf.ChildPid, Started: pf.Started, OutputAgeS: -1}
		p.State = procStateName(pf.ChildPid, pf.ChildStart)
		if mt, ok := t.lastLog(name); ok {
			// A line written since now was taken is no age below 0
			// (which reads as "no log").
			p.OutputAgeS = max(0, now.Sub(mt).Seconds())
		}
		p.Step, p.StepRate = t.step(name)
		pg := pf.Pgid
		if pg <= 0 {
			pg = pf.ChildPid
		}
		if cpu, ok := groupCPU(pg); ok && p.State != "gone" {
			p.CPUSeconds = &cpu
		}
		out = append(out, p)
	}
	return out
}

// lastLog is when the newest attempt's log of process name last grew: a
// foreground run's (.drover/logs/attempt-N/) or the newest detached
// run's (.drover/runs/ID/attempt-N/, which drover status reads), so that
// top and status give a detached process the same output age.
func (t *topper) lastLog(name string) (time.Time, bool) {
	logs, _ := filepath.Glob(filepath.Join(t.workdir, ".drover", "logs", "attempt-*", name+".log"))
	if id, err := os.Readlink(filepath.Join(t.workdir, CurrentRun)); err == nil && !strings.ContainsRune(id, '/') {
		runLogs, _ := filepath.Glob(filepath.Join(t.workdir, RunDir(id), "attempt-*", name+".log"))
		logs = append(logs, runLogs...)
	}
	var newest time.Time
	for _, l := range logs {
		if st, err := os.Stat(l); err == nil && st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	return newest, !newest.IsZero()
}

// stepRE is how a script reports its step in DROVER_PROGRESS_FILE.
var stepRE = regexp.MustCompile(`step=(\d+)`)

// step reads the last step=N of process name's progress file and the
// rate between the last two changes this agent saw, timed by the file's
// modification times (when the script wrote them, not when they were
// read).
func (t *topper) step(name string) (*int64, *float64) {
	f, err := os.Open(filepath.Join(t.workdir, ".drover", "progress", name))
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil
	}
	at := st.ModTime()
	var last string
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		if m := stepRE.FindAllStringSubmatch(sc.Text(), -1); m != nil {
			last = m[len(m)-1][1]
		}
	}
	n, err := strconv.ParseInt(last, 10, 64)
	if err != nil {
		return nil, nil
	}
	prev, seen := t.steps[name]
	cur := stepSeen{step: n, at: at, rate: prev.rate}
	switch {
	case seen && n == prev.step:
		cur = prev
	case seen && n > prev.step && at.After(prev.at):
		r := float64(n-prev.step) / at.Sub(prev.at).Seconds()
		cur.rate = &r
	}
	t.steps[name] = cur
	return &n, cur.rate
}

func uniqueInts(xs []int) []int {
	var out []int
	for _, x := range xs {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}
