package topview

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/top"
)

// Collector turns the view at each scrape into Prometheus metrics: the
// numbers are read when asked for, so a scrape never shows a number
// older than the watcher's last sample.
type Collector struct {
	view func() top.View
}

// NewCollector collects what view returns.
func NewCollector(view func() top.View) *Collector { return &Collector{view: view} }

var (
	gpuLabels  = []string{"job", "host", "gpu", "rank"}
	procLabels = []string{"job", "host", "rank", "process"}

	descHostUp     = prometheus.NewDesc("drover_host_up", "1 when the host answered within the last 3 s.", []string{"job", "host"}, nil)
	descUtil       = prometheus.NewDesc("drover_gpu_utilization_percent", "GPU (SM) utilisation.", gpuLabels, nil)
	descMemUsed    = prometheus.NewDesc("drover_gpu_memory_used_bytes", "GPU memory in use.", gpuLabels, nil)
	descMemTotal   = prometheus.NewDesc("drover_gpu_memory_total_bytes", "GPU memory in all.", gpuLabels, nil)
	descTemp       = prometheus.NewDesc("drover_gpu_temperature_celsius", "GPU temperature.", gpuLabels, nil)
	descPower      = prometheus.NewDesc("drover_gpu_power_watts", "GPU power draw.", gpuLabels, nil)
	descThrottle   = prometheus.NewDesc("drover_gpu_throttle_reasons", "Clock event (throttle) reasons bitmask, as nvml.h's nvmlClocksEventReason bits.", gpuLabels, nil)
	descECC        = prometheus.NewDesc("drover_gpu_ecc_uncorrected_volatile", "Uncorrectable ECC errors since the driver loaded.", gpuLabels, nil)
	descFindings   = prometheus.NewDesc("drover_gpu_health_findings", "What the run's GPU health watch found on the GPU, by severity (critical, warning).", append(gpuLabels, "severity"), nil)
	descProcUp     = prometheus.NewDesc("drover_process_running", "1 while the process runs (any state but gone or zombie).", procLabels, nil)
	descOutputAge  = prometheus.NewDesc("drover_process_output_age_seconds", "Seconds since the process's log last grew.", procLabels, nil)
	descStep       = prometheus.NewDesc("drover_process_step", "The last step=N the process wrote to DROVER_PROGRESS_FILE.", procLabels, nil)
	descStepRate   = prometheus.NewDesc("drover_process_steps_per_second", "Steps per second between the last two steps seen.", procLabels, nil)
	allDescs       = []*prometheus.Desc{descHostUp, descUtil, descMemUsed, descMemTotal, descTemp, descPower, descThrottle, descECC, descFindings, descProcUp, descOutputAge, descStep, descStepRate}
	bytesPerMiB    = float64(1 << 20)
	notRunningProc = map[string]bool{"gone": true, "zombie": true}
)

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect sends the view's numbers; a value a GPU did not report is
// left out rather than sent as 0.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	for _, h := range v.Hosts {
		up := 0.0
		if h.Reachable {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descHostUp, prometheus.GaugeValue, up, v.Job, h.Host)
		if !h.Reachable {
			continue
		}
		for _, g := range h.GPUs {
			collectGPU(ch, v.Job, h, g)
		}
		for _, p := range h.Procs {
			collectProc(ch, v.Job, h.Host, p)
		}
	}
}

func collectGPU(ch chan<- prometheus.Metric, job string, h top.Host, g agent.TopGPU) {
	labels := []string{job, h.Host, strconv.Itoa(g.Index), rankLabel(h, g)}
	put := func(d *prometheus.Desc, v *float64, scale float64) {
		if v != nil {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, *v*scale, labels...)
		}
	}
	put(descUtil, g.UtilPct, 1)
	put(descMemUsed, g.MemUsedMiB, bytesPerMiB)
	put(descMemTotal, g.MemTotalMiB, bytesPerMiB)
	put(descTemp, g.TempC, 1)
	put(descPower, g.PowerW, 1)
	put(descECC, g.ECCVolatile, 1)
	if g.Throttle != nil {
		ch <- prometheus.MustNewConstMetric(descThrottle, prometheus.GaugeValue, float64(*g.Throttle), labels...)
	}
	if g.Health != nil {
		crit, warn := 0.0, 0.0
		for _, f := range g.Health {
			if f.Critical {
				crit++
			} else {
				warn++
			}
		}
		ch <- prometheus.MustNewConstMetric(descFindings, prometheus.GaugeValue, crit, append(labels, "critical")...)
		ch <- prometheus.MustNewConstMetric(descFindings, prometheus.GaugeValue, warn, append(labels, "warning")...)
	}
}

func collectProc(ch chan<- prometheus.Metric, job, host string, p agent.TopProc) {
	labels := []string{job, host, rankOf(p.Name), p.Name}
	running := 1.0
	if notRunningProc[p.State] {
		running = 0
	}
	ch <- prometheus.MustNewConstMetric(descProcUp, prometheus.GaugeValue, running, labels...)
	if p.OutputAgeS >= 0 {
		ch <- prometheus.MustNewConstMetric(descOutputAge, prometheus.GaugeValue, p.OutputAgeS, labels...)
	}
	if p.Step != nil {
		ch <- prometheus.MustNewConstMetric(descStep, prometheus.GaugeValue, float64(*p.Step), labels...)
	}
	if p.StepRate != nil {
		ch <- prometheus.MustNewConstMetric(descStepRate, prometheus.GaugeValue, *p.StepRate, labels...)
	}
}

// rankOf is a process's index from its plan name ("worker-3" is 3): the
// rank of a process-per-GPU job, the node rank of a torchrun one.
func rankOf(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	return name[i+1:]
}

// rankLabel is the ranks of the processes using g, comma-separated, ""
// when none does.
func rankLabel(h top.Host, g agent.TopGPU) string {
	var ranks []string
	for _, p := range h.Procs {
		for _, i := range p.GPUs {
			if i == g.Index {
				ranks = append(ranks, rankOf(p.Name))
			}
		}
	}
	return strings.Join(ranks, ",")
}
