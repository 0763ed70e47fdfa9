package gpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// SMIQueries are the nvidia-smi commands of the fallback probe, whose
// outputs ReportFromSMI parses (SMIOutputs has one field per query). GPUs
// is required; the others add processes, MIG mode and the CUDA version when
// they work (older drivers lack mig.mode.current, and nvidia-smi has no CSV
// field for the CUDA version, which only its banner shows).
var SMIQueries = struct{ GPUs, Apps, MIG, Banner []string }{
	GPUs: []string{"nvidia-smi",
		"--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,pci.bus_id,driver_version",
		"--format=csv,noheader,nounits"},
	Apps: []string{"nvidia-smi",
		"--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
		"--format=csv,noheader,nounits"},
	MIG: []string{"nvidia-smi",
		"--query-gpu=index,mig.mode.current",
		"--format=csv,noheader"},
	Banner: []string{"nvidia-smi"},
}

// smiUnknown reports whether an nvidia-smi CSV value stands for "not
// reported": "[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", ...
func smiUnknown(v string) bool {
	return v == "" || strings.HasPrefix(v, "[") || strings.EqualFold(v, "N/A")
}

// SMIRecord splits line n (counted from 1) of a `--query-gpu=QUERY
// --format=csv,noheader,nounits` answer into its want fields, trimmed, the
// first of which is the GPU's index. Every --query-gpu parser (the probe's,
// the health gate's, drover top's) reads its lines through it, so that a
// line of the wrong shape is refused the same way everywhere.
func SMIRecord(n int, line, query string, want int) (int, []string, error) {
	f := strings.Split(line, ",")
	if len(f) != want {
		return 0, nil, fmt.Errorf("parse nvidia-smi --query-gpu=%s line %d %q: want %d fields, got %d", query, n, line, want, len(f))
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	idx, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, nil, fmt.Errorf("parse nvidia-smi --query-gpu=%s line %d: index %q: %w", query, n, f[0], err)
	}
	return idx, f, nil
}

// ParseSMIGPUs parses the output of
// `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,pci.bus_id,driver_version --format=csv,noheader,nounits`
// into devices (without processes) and the driver version.
func ParseSMIGPUs(out []byte) ([]Device, string, error) {
	var devs []Device
	driver := ""
	for n, line := range SMILines(out) {
		idx, f, err := SMIRecord(n+1, line, "index,uuid,...,driver_version", 8)
		if err != nil {
			return nil, "", err
		}
		d := Device{Index: idx, Processes: []Process{}}
		if smiUnknown(f[1]) {
			d.markUnknown(FieldUUID)
		} else {
			d.UUID = f[1]
		}
		if smiUnknown(f[2]) {
			d.markUnknown(FieldName)
		} else {
			d.Name = f[2]
		}
		total, err1 := strconv.ParseInt(f[3], 10, 64)
		used, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			d.markUnknown(FieldMemory)
		} else {
			d.MemoryTotalMiB, d.MemoryUsedMiB = total, used
		}
		if u, err := strconv.Atoi(f[5]); err == nil {
			d.UtilizationPct = u
		} else {
			d.markUnknown(FieldUtilization)
		}
		if smiUnknown(f[6]) {
			d.markUnknown(FieldPCIBusID)
		} else {
			d.PCIBusID = f[6]
		}
		if !smiUnknown(f[7]) {
			driver = f[7]
		}
		devs = append(devs, d)
	}
	return devs, driver, nil
}

// ParseSMIApps parses
// `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits`
// into processes per GPU UUID. The process name sits between fields that
// cannot contain commas, so a name with commas survives.
func ParseSMIApps(out []byte) (map[string][]Process, error) {
	procs := map[string][]Process{}
	for n, line := range SMILines(out) {
		first := strings.SplitN(line, ",", 3)
		last := strings.LastIndex(line, ",")
		if len(first) != 3 || last <= len(first[0])+len(first[1])+1 {
			return nil, fmt.Errorf("parse nvidia-smi --query-compute-apps line %d %q: want 4 fields", n+1, line)
		}
		uuid := strings.TrimSpace(first[0])
		pid, err := strconv.Atoi(strings.TrimSpace(first[1]))
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi --query-compute-apps line %d: pid %q: %w", n+1, first[1], err)
		}
		name := strings.TrimSpace(line[len(first[0])+len(first[1])+2 : last])
		if smiUnknown(name) {
			name = ""
		}
		p := Process{PID: pid, Name: name, UsedMiB: -1}
		if m, err := strconv.ParseInt(strings.TrimSpace(line[last+1:]), 10, 64); err == nil {
			p.UsedMiB = m
		}
		procs[uuid] = append(procs[uuid], p)
	}
	return procs, nil
}

// ParseSMIMIG parses `nvidia-smi --query-gpu=index,mig.mode.current
// --format=csv,noheader` into MIG mode per index; GPUs that cannot do MIG
// print "[N/A]" and are left out.
func ParseSMIMIG(out []byte) (map[int]bool, error) {
	mig := map[int]bool{}
	for n, line := range SMILines(out) {
		idx, mode, ok := strings.Cut(line, ",")
		if !ok {
			return nil, fmt.Errorf("parse nvidia-smi mig.mode.current line %d %q: want 2 fields", n+1, line)
		}
		i, err := strconv.Atoi(strings.TrimSpace(idx))
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi mig.mode.current line %d: index %q: %w", n+1, idx, err)
		}
		switch strings.TrimSpace(mode) {
		case "Enabled":
			mig[i] = true
		case "Disabled":
			mig[i] = false
		}
	}
	return mig, nil
}

var smiCUDA = regexp.MustCompile(`CUDA Version:\s*([0-9]+\.[0-9]+)`)

// ParseSMIBanner finds the CUDA version in plain nvidia-smi output ("" if
// absent).
func ParseSMIBanner(out []byte) string {
	if m := smiCUDA.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// SMIOutputs are the raw outputs of the fallback probe's nvidia-smi
// commands; nil for a command that failed. Keeping them raw lets tests
// feed recorded outputs through the same assembly as a live probe.
type SMIOutputs struct {
	GPUs, Apps, MIG, Banner []byte
}

// ReportFromSMI assembles a HostReport from nvidia-smi outputs. Only GPUs
// is required; missing optional outputs mark fields unknown.
func ReportFromSMI(host string, o SMIOutputs) (HostReport, error) {
	rep := HostReport{Host: host, Source: SourceSMI}
	devs, driver, err := ParseSMIGPUs(o.GPUs)
	if err != nil {
		return rep, err
	}
	rep.Devices, rep.Driver = devs, driver
	if rep.Devices == nil {
		rep.Devices = []Device{}
	}
	rep.CUDA = ParseSMIBanner(o.Banner)
	var procs map[string][]Process
	if o.Apps != nil {
		if procs, err = ParseSMIApps(o.Apps); err != nil {
			procs = nil
		}
	}
	var mig map[int]bool
	if o.MIG != nil {
		if mig, err = ParseSMIMIG(o.MIG); err != nil {
			mig = nil
		}
	}
	for i := range rep.Devices {
		d := &rep.Devices[i]
		if procs == nil {
			d.markUnknown(FieldProcesses)
		} else if ps := procs[d.UUID]; ps != nil {
			d.Processes = ps
		}
		if mig == nil {
			d.markUnknown(FieldMIG)
		} else {
			d.MIG = mig[d.Index]
		}
	}
	if len(rep.Devices) == 0 {
		rep.Reason = "nvidia-smi lists no GPUs"
	}
	return rep, nil
}

// SMILines splits nvidia-smi's output into its non-empty trimmed lines.
func SMILines(out []byte) []string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}
