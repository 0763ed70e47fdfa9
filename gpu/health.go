package gpu

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Health is what a GPU says about its own soundness: the counters and
// states a health gate reads before and while a job trains (see
// CheckHealth). A nil pointer means the source did not report the value
// ("[N/A]" in nvidia-smi, ERROR_NOT_SUPPORTED in NVML): an H200 has no
// page retirement (it remaps rows instead), a GeForce no ECC. Pointers
// rather than an Unknown list because each counter is its own question
// and JSON then shows only what was read.
type Health struct {
	// ECCVolatile and ECCAggregate count uncorrectable ECC errors since
	// the driver loaded, and over the GPU's life.
	ECCVolatile  *uint64 `json:"ecc_uncorrected_volatile,omitempty"`
	ECCAggregate *uint64 `json:"ecc_uncorrected_aggregate,omitempty"`
	// RetiredPending: pages are waiting to be retired at the next
	// driver reload (pre-Ampere GPUs).
	RetiredPending *bool `json:"retired_pages_pending,omitempty"`
	// RemapPending: a row remap waits for a GPU reset; RemapFailure: a
	// remap failed (no spare rows left), Ampere and later.
	RemapPending *bool `json:"remap_pending,omitempty"`
	RemapFailure *bool `json:"remap_failure,omitempty"`
	// Throttle is the clock event (throttle) reasons bitmask, as NVML's
	// nvmlClocksEventReason* and nvidia-smi's clocks_event_reasons.active.
	Throttle *uint64 `json:"throttle_reasons,omitempty"`
	// PCIe link generation and width, current and maximum.
	PCIeGen      *int `json:"pcie_gen,omitempty"`
	PCIeGenMax   *int `json:"pcie_gen_max,omitempty"`
	PCIeWidth    *int `json:"pcie_width,omitempty"`
	PCIeWidthMax *int `json:"pcie_width_max,omitempty"`
}

// XID is one Xid event of the NVIDIA driver: from NVML's event set or a
// "NVRM: Xid" line of the kernel log.
type XID struct {
	// GPU is the NVML index it names, -1 when it could not be matched
	// to a device (PCI names the GPU then).
	GPU  int    `json:"gpu"`
	PCI  string `json:"pci,omitempty"`
	Code int    `json:"code"`
	// Text is the kernel log's line, or what NVML said.
	Text string `json:"text,omitempty"`
	// Key tells one event from another across polls: the kernel log
	// record, or NVML's event with the time it was read.
	Key string `json:"key"`
}

// Throttle reason bits (nvml.h nvmlClocksEventReason*).
const (
	ThrottleHWSlowdown     = 0x8
	ThrottleSWThermal      = 0x20
	ThrottleHWThermal      = 0x40
	ThrottleHWPowerBrake   = 0x80
	throttleWarnMask       = ThrottleHWSlowdown | ThrottleSWThermal | ThrottleHWThermal | ThrottleHWPowerBrake
	xidCatalogue           = "https://docs.nvidia.com/deploy/xid-errors/"
	throttleFixCooling     = "check the host's cooling and airflow"
	throttleFixPowerSupply = "check the host's power supply and the GPU's power cables"
)

var throttleNames = []struct {
	bit  uint64
	name string
	fix  string
}{
	{ThrottleHWThermal, "hardware thermal slowdown", throttleFixCooling},
	{ThrottleSWThermal, "software thermal slowdown", throttleFixCooling},
	{ThrottleHWPowerBrake, "hardware power brake slowdown", throttleFixPowerSupply},
	{ThrottleHWSlowdown, "hardware slowdown", throttleFixCooling + " and power supply"},
}

// HealthPolicy is what makes a finding critical (every Xid not in
// IgnoreXIDs is), and when a reading means nothing.
type HealthPolicy struct {
	IgnoreXIDs []int
	// Idle says the GPUs are not working (before an attempt): a PCIe
	// link generation below its maximum is then power saving (an idle
	// A100 drops to gen 1), not a fault, and is not reported.
	Idle bool
}

// Finding is one thing wrong with one GPU of one host.
type Finding struct {
	Host string `json:"host"`
	// GPU names the GPU: "GPU 1", or "GPU 0000:3B:00.0" for one NVML or
	// nvidia-smi could not index (it is lost).
	GPU string `json:"gpu"`
	// Critical findings keep the host out of a job (health = "enforce");
	// the others are warnings.
	Critical bool   `json:"critical"`
	What     string `json:"what"`
	Fix      string `json:"fix"`
}

// String is the finding as events and errors show it.
func (f Finding) String() string {
	return fmt.Sprintf("%s %s: %s (fix: %s)", f.Host, f.GPU, f.What, f.Fix)
}

// CheckHealth turns a report's health into findings, critical first.
// Only the report's XIDs are judged as events, so the caller passes the
// ones it has not judged before. An aggregate ECC count without a
// volatile one is a warning: it is history the driver has already dealt
// with (by retiring pages or remapping rows, whose pending and failed
// states are critical in their own right).
func CheckHealth(rep HostReport, p HealthPolicy) []Finding {
	var out []Finding
	add := func(gpu string, crit bool, what, fix string) {
		out = append(out, Finding{Host: rep.Host, GPU: gpu, Critical: crit, What: what, Fix: fix})
	}
	for _, l := range rep.LostGPUs {
		add("GPU "+l, true, "GPU is lost (fell off the bus or stopped answering)", "reboot the host; if it recurs, reseat or replace the GPU")
	}
	for _, d := range rep.Devices {
		if d.Health != nil {
			checkDevice(fmt.Sprintf("GPU %d", d.Index), *d.Health, p.Idle, add)
		}
	}
	for _, x := range rep.XIDs {
		g := fmt.Sprintf("GPU %d", x.GPU)
		if x.GPU < 0 {
			g = "GPU " + x.PCI
		}
		what := fmt.Sprintf("Xid %d", x.Code)
		if x.Text != "" {
			what += " (" + x.Text + ")"
		}
		if notHostGPU(rep, x) {
			add(g, false, what+", at a PCI address that is none of this host's GPUs",
				"none for the job; if the host has a GPU there that NVML does not list, check it ("+xidCatalogue+")")
			continue
		}
		if slices.Contains(p.IgnoreXIDs, x.Code) {
			add(g, false, what+", in ignore_xids", "none needed if the job's own code caused it; "+xidCatalogue)
			continue
		}
		add(g, true, what, fmt.Sprintf("reset the GPU or reboot the host (see %s for Xid %d); add %d to ignore_xids if it is harmless here", xidCatalogue, x.Code, x.Code))
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if a.Critical == b.Critical {
			return 0
		}
		if a.Critical {
			return -1
		}
		return 1
	})
	return out
}

// notHostGPU says whether x names a PCI address that is none of the
// host's GPUs, as far as the report knows them (its devices and the lost
// ones): such an Xid is a warning, never a reason to fence the host. With
// no device known, it cannot be told and stays critical.
func notHostGPU(rep HostReport, x XID) bool {
	if x.GPU >= 0 || x.PCI == "" || len(rep.Devices) == 0 {
		return false
	}
	for _, d := range rep.Devices {
		if samePCI(d.PCIBusID, x.PCI) {
			return false
		}
	}
	for _, l := range rep.LostGPUs {
		if samePCI(l, x.PCI) {
			return false
		}
	}
	return true
}

// checkDevice adds the findings of one GPU's counters.
func checkDevice(g string, h Health, idle bool, add func(gpu string, crit bool, what, fix string)) {
	if h.ECCVolatile != nil && *h.ECCVolatile > 0 {
		add(g, true, fmt.Sprintf("%d uncorrectable ECC error(s) since the driver loaded (ecc.errors.uncorrected.volatile.total)", *h.ECCVolatile),
			"reset the GPU (nvidia-smi -r) or reboot the host; if errors come back, replace the GPU")
	} else if h.ECCAggregate != nil && *h.ECCAggregate > 0 {
		add(g, false, fmt.Sprintf("%d uncorrectable ECC error(s) over the GPU's life (ecc.errors.uncorrected.aggregate.total)", *h.ECCAggregate),
			"none while no row remap or page retirement is pending or failed; watch the count")
	}
	if h.RetiredPending != nil && *h.RetiredPending {
		add(g, true, "retired pages pending", "reboot the host or reset the GPU so that the driver retires the pages")
	}
	if h.RemapFailure != nil && *h.RemapFailure {
		add(g, true, "row remapping failed (no spare rows left)", "replace the GPU")
	} else if h.RemapPending != nil && *h.RemapPending {
		add(g, true, "row remapping pending", "reset the GPU (nvidia-smi -r) or reboot the host to apply the remap")
	}
	if h.Throttle != nil {
		for _, t := range throttleNames {
			if *h.Throttle&t.bit != 0 {
				add(g, false, fmt.Sprintf("clocks throttled: %s (reasons 0x%x)", t.name, *h.Throttle), t.fix)
			}
		}
	}
	if h.PCIeWidth != nil && h.PCIeWidthMax != nil && *h.PCIeWidth < *h.PCIeWidthMax {
		add(g, false, fmt.Sprintf("PCIe link x%d of x%d", *h.PCIeWidth, *h.PCIeWidthMax), "reseat the GPU or check its riser and slot")
	}
	if !idle && h.PCIeGen != nil && h.PCIeGenMax != nil && *h.PCIeGen < *h.PCIeGenMax {
		add(g, false, fmt.Sprintf("PCIe link gen %d of %d while the job runs", *h.PCIeGen, *h.PCIeGenMax),
			"check the slot and the BIOS PCIe settings; if it only happens between steps, ignore it")
	}
}

// SMIHealthFields are the --query-gpu fields of SMIQueries.Health, in
// order; ParseSMIHealth reads them.
const SMIHealthFields = "index,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total," +
	"retired_pages.pending,remapped_rows.pending,remapped_rows.failure,clocks_throttle_reasons.active," +
	"pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"

// SMIHealthQuery is the nvidia-smi command that reads every GPU's health
// where NVML cannot be loaded.
var SMIHealthQuery = []string{"nvidia-smi", "--query-gpu=" + SMIHealthFields, "--format=csv,noheader,nounits"}

// lostLine is how nvidia-smi names a GPU it cannot reach:
// "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost. ..."
var lostLine = regexp.MustCompile(`(?i)GPU\s*([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])?[^,]*GPU is lost`)

// ParseSMIHealth parses SMIHealthQuery's output (the real forms: "0",
// "[N/A]", "No"/"Yes", "0x0000000000000000") into health per index, and
// the GPUs it reports lost (by PCI bus id, or "?" when the line names
// none). It parses what nvidia-smi printed even when it exited non-zero,
// which it does when a GPU is lost.
func ParseSMIHealth(out []byte) (map[int]Health, []string, error) {
	health := map[int]Health{}
	var lost []string
	for n, line := range SMILines(out) {
		if m := lostLine.FindStringSubmatch(line); m != nil && !strings.Contains(line, ",") {
			id := m[1]
			if id == "" {
				id = "?"
			}
			lost = append(lost, strings.ToUpper(id))
			continue
		}
		idx, f, err := SMIRecord(n+1, line, SMIHealthFields, 11)
		if err != nil {
			return nil, nil, err
		}
		if slices.ContainsFunc(f[1:], func(v string) bool { return strings.Contains(strings.ToLower(v), "gpu is lost") }) {
			lost = append(lost, strconv.Itoa(idx))
			continue
		}
		health[idx] = Health{
			ECCVolatile: SMIUint(f[1]), ECCAggregate: SMIUint(f[2]),
			RetiredPending: smiBool(f[3]), RemapPending: smiBool(f[4]), RemapFailure: smiBool(f[5]),
			Throttle: SMIUint(f[6]),
			PCIeGen:  smiInt(f[7]), PCIeGenMax: smiInt(f[8]), PCIeWidth: smiInt(f[9]), PCIeWidthMax: smiInt(f[10]),
		}
	}
	return health, lost, nil
}

// AddSMIHealth puts ParseSMIHealth's result into rep.
func AddSMIHealth(rep *HostReport, health map[int]Health, lost []string) {
	for i := range rep.Devices {
		if h, ok := health[rep.Devices[i].Index]; ok {
			rep.Devices[i].Health = &h
		}
	}
	rep.LostGPUs = append(rep.LostGPUs, lost...)
}

// smiUint reads a count or a hex bitmask; nil for "[N/A]" and the like.
func SMIUint(v string) *uint64 {
	if smiUnknown(v) {
		return nil
	}
	u, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return nil
	}
	return &u
}

func smiInt(v string) *int {
	u := SMIUint(v)
	if u == nil {
		return nil
	}
	i := int(*u)
	return &i
}

// smiBool reads "Yes"/"No" (remapped_rows.*, retired_pages.pending) and
// "Enabled"/"Disabled"; nil for anything else.
func smiBool(v string) *bool {
	var b bool
	switch strings.ToLower(v) {
	case "yes", "enabled", "1", "true":
		b = true
	case "no", "disabled", "0", "false":
	default:
		return nil
	}
	return &b
}

// kernelXID matches the driver's Xid lines: "NVRM: Xid (PCI:0000:3b:00):
// 79, pid=..., GPU has fallen off the bus." (older drivers leave out
// "PCI:").
var kernelXID = regexp.MustCompile(kernelXIDPattern)

const kernelXIDPattern = `NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\): (\d+)(?:,\s*(.*))?`

// kernelXIDStart matches a message that is an Xid from its first byte.
var kernelXIDStart = regexp.MustCompile(`^` + kernelXIDPattern)

// IsKernelXIDMessage says whether a kernel log message (the text after
// the record's prefix or time stamp) is the driver's Xid from its first
// byte. One that only contains such text is not: the kernel quotes
// names users choose (a crashing program's file name in "segfault at
// ... in NAME"), and a local user could forge an Xid that way.
func IsKernelXIDMessage(msg string) bool { return kernelXIDStart.MatchString(msg) }

// ParseKernelXIDs finds the Xid lines in kernel log output (/dev/kmsg
// records or dmesg lines) and names the GPU of each by matching its PCI
// address with devs. Each XID's Key is its whole line, which carries the
// record's sequence number or time stamp, so a poll that reads the same
// log again tells old events from new ones.
func ParseKernelXIDs(out []byte, devs []Device) []XID {
	var xs []XID
	for _, line := range SMILines(out) {
		m := kernelXID.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		code, err := strconv.Atoi(m[2])
		if err != nil {
			continue
		}
		x := XID{GPU: -1, PCI: strings.ToUpper(m[1]), Code: code, Text: printable(strings.TrimSpace(m[3]), xidTextMax), Key: line}
		for _, d := range devs {
			if samePCI(d.PCIBusID, m[1]) {
				x.GPU = d.Index
			}
		}
		xs = append(xs, x)
	}
	return xs
}

// xidTextMax bounds the kernel's text of an Xid kept in a finding.
const xidTextMax = 200

// printable is s with anything a terminal would act on (control
// characters, invalid UTF-8) replaced by '?', cut to max bytes: the text
// comes from a host's kernel log and ends up in drover's events.
func printable(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// samePCI compares a full bus id ("00000000:3B:00.0") with the kernel's
// short form ("0000:3b:00"): domain as a number, bus and device as text.
func samePCI(busID, short string) bool {
	norm := func(s string) (uint64, string, bool) {
		dom, rest, ok := strings.Cut(strings.ToLower(s), ":")
		if !ok {
			return 0, "", false
		}
		d, err := strconv.ParseUint(dom, 16, 64)
		rest, _, _ = strings.Cut(rest, ".")
		return d, rest, err == nil
	}
	d1, r1, ok1 := norm(busID)
	d2, r2, ok2 := norm(short)
	return ok1 && ok2 && d1 == d2 && r1 == r2
}
