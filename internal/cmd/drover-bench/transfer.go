package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/fleettest"
)

// The transfer section (issue 27): how long checkpoint copies and staging
// take when the controller sits behind a slow link (50 Mbit/s, token
// bucket on both ends of its own veth; this kernel has tbf, not netem)
// and the hosts share a fast bridge, for one large file and for 1,000
// shard files, onto 1 and onto 8 hosts; and the controller's CPU and
// peak RSS meanwhile. The controller is a child of this harness run in a
// network namespace of its own (transferChild) with the code drover run
// uses (launcher/checkpoint, drover agent send/recv on the hosts).
const (
	// transferBudget: the checkpoint cases took 5-7 minutes, the data
	// staging cases (up to 2 GiB onto 8 hosts at 400 Mbit/s each) about 4.
	transferBudget = 12 * time.Minute
	transferHosts  = 9 // h0 holds the checkpoints; staging onto up to 8 others
	transferRate   = "50mbit"
	// transferLink is each host's own link in the second half of the
	// section (LimitHosts): slow enough that the 2 shared cores are not
	// what sets the time (9 hosts at 50 MB/s need about one core),
	// so that onto 8 against onto 1 is measured as on a fleet whose hosts
	// have CPUs and NICs of their own.
	transferLink     = "400mbit"
	transferChildArg = "transfer-child"
	// transferStart is the child's line before each case.
	transferStart = "start"
)

// transferCase is one measurement the child makes.
type transferCase struct {
	// Kind is "copy" (a Watcher copies it to Targets hosts while
	// "training"), "stage" (the checkpoint Manager's Stage puts it on
	// Targets hosts) or "data" (launcher/stage stages the entry as a
	// [[data]] set onto Targets hosts, transfer_data.go).
	Kind    string
	Entry   string // the checkpoint on h0, alone in its own checkpoint_dir
	Targets int
	Relay   bool // hosts without agents: through the controller
	// Link is every host's own link rate (LimitHosts), "" for none.
	Link string
}

// transferSpec is what the child is told on stdin.
type transferSpec struct {
	Hosts []config.Host
	Agent string // the drover binary, readable by the fleet's user
	Cases []transferCase
}

// transferResult is one case's outcome, a JSON line on the child's stdout.
type transferResult struct {
	Case    transferCase
	Seconds float64
	// Again is a data case's second staging, nothing changed, seconds.
	Again  float64
	CPU    float64 // controller CPU seconds during the case
	MaxRSS float64 // controller peak RSS so far, MiB
	// HostsCPU is the CPU seconds every host used during the case (the
	// fleet's cgroup: sshd, the agents, every hash and write; 0 without
	// cgroup accounting), filled in by the harness.
	HostsCPU float64
	Err      string
}

// transferEntries are the checkpoints h0 holds: name, total size, files.
var transferEntries = []struct {
	name  string
	size  int64
	files int
}{
	{"one-200M", 200 << 20, 1}, {"shards-200M", 200 << 20, 1000},
	{"one-2G", 2 << 30, 1}, {"shards-2G", 2 << 30, 1000},
}

// transfer runs the section on its own fleet.
func (b *bench) transfer(ctx context.Context) []Row {
	ctx, cancel := context.WithTimeout(ctx, transferBudget)
	defer cancel()
	opts := fleettest.Options{Name: b.fleetPrefix + "tx", N: transferHosts, Subnet: b.subnet + 4}
	b.progress("bringing up fleet %s (%d hosts, homes on disk)", opts.Name, opts.N)
	f, err := upFleet(opts)
	if err != nil {
		b.note("transfer fleet did not come up: %v", err)
		return []Row{{Section: "transfer", N: transferHosts, What: "checkpoint copies and staging", Drover: na("no fleet")}}
	}
	defer f.Close()
	link, err := f.SlowLink(transferRate)
	if err != nil {
		b.note("transfer: %v", err)
		return []Row{{Section: "transfer", N: transferHosts, What: "checkpoint copies and staging", Drover: na("no slow link")}}
	}
	defer link.Close()
	ns := link.NS
	bin := path.Join(b.work, "tx-agent")
	if err := copyFile(b.drover, bin); err != nil {
		b.note("transfer: %v", err)
		return nil
	}
	cases, linkCases := b.transferCases(f.Fleet)
	b.progress("transfer: %d measurements from a controller %s away (namespace %s)", len(cases), transferRate, ns)
	spec := transferSpec{Hosts: f.ClusterHosts(), Agent: bin, Cases: cases}
	results, err := runTransferChild(ctx, ns, spec, f.cpu, b.stderr)
	if err != nil {
		b.note("transfer: %v", err)
	}
	if len(linkCases) > 0 && ctx.Err() == nil {
		b.progress("transfer: %d measurements with every host's link at %s", len(linkCases), b.transferLink)
		if err := f.LimitHosts(b.transferLink); err != nil {
			b.note("transfer: %v", err)
		} else {
			spec.Cases = linkCases
			more, err := runTransferChild(ctx, ns, spec, f.cpu, b.stderr)
			if err != nil {
				b.note("transfer, hosts' links at %s: %v", b.transferLink, err)
			}
			results = append(results, more...)
			if err := f.LimitHosts(""); err != nil {
				b.note("transfer: %v", err)
			}
		}
	}
	return transferRows(results)
}

// transferCases writes the checkpoints on h0 and returns what to measure:
// with the hosts' links as fast as this machine is, and then staging
// again with every host's link at -transfer-link (up to
// -transfer-link-max bytes).
func (b *bench) transferCases(f *fleettest.Fleet) (cases, linkCases []transferCase) {
	for _, e := range transferEntries {
		if e.size > b.transferMax || (e.files == 1 && !b.transferKinds["copy"] && !b.transferKinds["stage"]) {
			continue
		}
		if err := makeEntry(f, e.name, e.size, e.files); err != nil {
			b.note("transfer: write %s on %s: %v", e.name, f.Hosts[0].Name, err)
			continue
		}
		if e.files == 1 && b.transferKinds["copy"] {
			cases = append(cases, transferCase{Kind: "copy", Entry: e.name, Targets: 2})
			if b.transferRelay && e.size <= 200<<20 {
				cases = append(cases, transferCase{Kind: "copy", Entry: e.name, Targets: 2, Relay: true})
			}
		}
		if b.transferKinds["stage"] {
			cases = append(cases, transferCase{Kind: "stage", Entry: e.name, Targets: 1}, transferCase{Kind: "stage", Entry: e.name, Targets: 8})
		}
		if b.transferLink != "" && e.size <= b.transferLinkMax && b.transferKinds["stage"] {
			linkCases = append(linkCases, transferCase{Kind: "stage", Entry: e.name, Targets: 1, Link: b.transferLink},
				transferCase{Kind: "stage", Entry: e.name, Targets: 8, Link: b.transferLink})
		}
		if b.transferLink != "" && e.files > 1 && b.transferKinds["data"] {
			linkCases = append(linkCases, dataCases(e.name, b.transferLink)...)
		}
	}
	return cases, linkCases
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read the agent binary: %w", err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o755); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// makeEntry writes checkpoint name on host 0 as the login user, alone in
// its own checkpoint_dir (~/tx/ck-<name>): one file, or files of equal
// size in a directory.
func makeEntry(f *fleettest.Fleet, name string, size int64, files int) error {
	dir := "/home/" + fleettest.User + "/tx/ck-" + name
	var script string
	if files == 1 {
		script = fmt.Sprintf(`set -e; mkdir -p %[1]s; head -c %[2]d /dev/urandom > %[1]s/%[3]s`, dir, size, name)
	} else {
		script = fmt.Sprintf(`set -e; mkdir -p %[1]s/%[2]s; head -c %[4]d /dev/urandom > %[1]s/seed; i=0; while [ $i -lt %[3]d ]; do
			{ echo $i; cat %[1]s/seed; } | head -c %[4]d > %[1]s/%[2]s/__${i}_0.distcp; i=$((i+1)); done; rm %[1]s/seed`,
			dir, name, files, size/int64(files))
	}
	script += fmt.Sprintf("; chown -R %s /home/%s/tx", fleettest.User, fleettest.User)
	out, err := f.Exec(0, "sh", "-c", script)
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// runTransferChild runs the controller's side in namespace ns. The child
// says "start" before each case; the hosts' CPU is read here between that
// line and the case's result: `ip netns exec` mounts a sysfs of its own,
// which hides the cgroup from the child.
func runTransferChild(ctx context.Context, ns string, spec transferSpec, cg *cpuGroup, stderr io.Writer) ([]transferResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, self, transferChildArg)
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the controller's side: %w", err)
	}
	var results []transferResult
	var before time.Duration
	var beforeErr error
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == transferStart {
			if cg != nil {
				before, beforeErr = cg.usage()
			}
			continue
		}
		var r transferResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		if cg != nil && beforeErr == nil {
			if after, err := cg.usage(); err == nil {
				r.HostsCPU = (after - before).Seconds()
			}
		}
		results = append(results, r)
	}
	if err := cmd.Wait(); err != nil {
		return results, fmt.Errorf("the controller's side: %w", err)
	}
	return results, nil
}

func (c transferCase) String() string {
	how := "host to host"
	if c.Relay {
		how = "through the controller"
	}
	if c.Kind == "copy" {
		return fmt.Sprintf("copy %s to %d hosts (checkpoint_copies = %d), %s", c.Entry, c.Targets, c.Targets+1, how)
	}
	if c.Kind == "data" {
		return fmt.Sprintf("drover stage: data set %s onto %d host(s), each host's link %s", c.Entry, c.Targets, c.Link)
	}
	if c.Link != "" {
		how += ", each host's link " + c.Link
	}
	return fmt.Sprintf("stage %s onto %d host(s), %s", c.Entry, c.Targets, how)
}

// transferRows makes the table: each staging onto 8 hosts against the
// same onto 1 (target: at most 1.5 times as long), each direct copy
// against the relay, and the controller's CPU and memory.
func transferRows(results []transferResult) []Row {
	var rows []Row
	find := func(c transferCase) (transferResult, bool) {
		for _, r := range results {
			if r.Case == c {
				return r, true
			}
		}
		return transferResult{}, false
	}
	for _, r := range results {
		m := measureOf(r)
		c := r.Case
		switch {
		case c.Kind == "data":
			rows = append(rows, dataRows(r, find)...)
		case c.Kind == "stage" && c.Targets == 8:
			one := c
			one.Targets = 1
			base, _ := find(one)
			rows = append(rows, Row{Section: "transfer", N: 9, What: c.String(), Drover: m, Baseline: "onto 1 host", BaselineTime: measureOf(base),
				Target: Target{MinSpeedup: 1 / 1.5}})
		case c.Kind == "stage":
			rows = append(rows, Row{Section: "transfer", N: 2, What: c.String(), Drover: m})
		case c.Kind == "copy" && !c.Relay:
			relay := c
			relay.Relay = true
			row := Row{Section: "transfer", N: 3, What: c.String(), Drover: m}
			if base, ok := find(relay); ok {
				row.Baseline, row.BaselineTime = "through the controller", measureOf(base)
			}
			rows = append(rows, row)
		}
		if r.Err == "" && r.HostsCPU > 0 && c.Kind != "copy" {
			rows = append(rows, stageCPURows(r)...)
		}
		if r.Err == "" {
			rows = append(rows, Row{Section: "transfer", N: c.Targets + 1, What: c.String() + ": controller CPU", Drover: Measure{Value: r.CPU * 1000, Unit: Millis, N: 1}},
				Row{Section: "transfer", N: c.Targets + 1, What: c.String() + ": controller peak RSS", Drover: Measure{Value: r.MaxRSS, Unit: MiB, N: 1},
					Target: Target{Max: 100, Unit: MiB}})
		}
	}
	return rows
}

// stageCPURows says what set a staging's time: the hosts' CPU per host
// (every host of the case: the sender and each receiver), and the wall
// time against the floor the 2 shared cores set (without per-host links)
// or against the floor each host's link sets (with them).
func stageCPURows(r transferResult) []Row {
	c := r.Case
	hosts := c.Targets + 1
	rows := []Row{{Section: "transfer", N: hosts, What: c.String() + ": hosts' CPU per host",
		Drover: Measure{Value: r.HostsCPU / float64(hosts) * 1000, Unit: Millis, N: 1}}}
	if c.Link == "" {
		floor := r.HostsCPU / float64(runtime.NumCPU())
		return append(rows, Row{Section: "transfer", N: hosts, What: c.String() + fmt.Sprintf(": wall time / hosts' CPU floor (%d cores)", runtime.NumCPU()),
			Drover: Measure{Value: r.Seconds / floor, Unit: Ratio, N: 1}})
	}
	if bits, ok := rateBits(c.Link); ok {
		floor := float64(entrySize(c.Entry)) * 8 / bits
		rows = append(rows, Row{Section: "transfer", N: hosts, What: c.String() + ": wall time / link floor (size / link rate)",
			Drover: Measure{Value: r.Seconds / floor, Unit: Ratio, N: 1}})
	}
	return rows
}

// rateBits reads tc's "400mbit" (kbit, mbit, gbit) as bits per second.
func rateBits(rate string) (float64, bool) {
	for suffix, mult := range map[string]float64{"kbit": 1e3, "mbit": 1e6, "gbit": 1e9} {
		if n, ok := strings.CutSuffix(rate, suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			return v * mult, err == nil && v > 0
		}
	}
	return 0, false
}

func entrySize(name string) int64 {
	for _, e := range transferEntries {
		if e.name == name {
			return e.size
		}
	}
	return 0
}

func measureOf(r transferResult) Measure {
	if r.Err != "" {
		return na("%s", r.Err)
	}
	if r.Seconds == 0 {
		return na("not measured")
	}
	return Measure{Value: r.Seconds, Unit: Seconds, N: 1}
}
