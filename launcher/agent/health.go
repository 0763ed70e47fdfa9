package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/gpu"
)

// HealthCommand returns the argv of `drover agent health --json`, which
// prints this host's GPU health (see WriteHealth). xidWait > 0 makes it
// listen that long for NVML's Xid events before it answers.
func HealthCommand(binary string, xidWait time.Duration) []string {
	return []string{binary, cmdAgent, cmdHealth, "--" + flagJSON, "--" + flagXIDWait, xidWait.String()}
}

// DefaultHealthEvery is how often a health watch reads by default.
const DefaultHealthEvery = 2 * time.Second

// smiTimeout bounds each nvidia-smi run of a health read: nvidia-smi hangs
// on a wedged GPU, and a hung read must not hold up the gate.
const smiTimeout = 30 * time.Second

// WriteHealth reads this host's GPUs with their health (gpu.Health) over
// NVML, or through nvidia-smi's --query-gpu health fields where NVML
// cannot be loaded, adds the Xids of the kernel log, and writes the
// report as JSON. It runs on the host because nvidia-smi and the kernel
// log are there: one command per read, not one per query.
func WriteHealth(ctx context.Context, w io.Writer, xidWait time.Duration) error {
	if err := json.NewEncoder(w).Encode(readHealth(ctx, xidWait)); err != nil {
		return fmt.Errorf("agent health: write report: %w", err)
	}
	return nil
}

// readHealth is one read of this host's GPU health (see WriteHealth).
func readHealth(ctx context.Context, xidWait time.Duration) gpu.HostReport {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	rep := probeNVML(host, xidWait)
	if rep.Source != gpu.SourceNVML {
		rep = healthSMI(ctx, host, rep.Reason)
	}
	addKernelXIDs(ctx, &rep)
	return rep
}

// WatchHealth reads this host's GPU health every `every` and writes each
// report to file (through a temporary file and a rename, so a reader
// never sees half of one), until ctx ends or the process that started it
// goes away. The agent that runs a job's first process on a host starts
// it (RunOptions.HealthFile); drover reads the file over the file access
// it already has, so watching a host costs no SSH session: an 8-GPU
// host's ranks and file access already fill sshd's default MaxSessions.
// Where NVML answers, each read listens `every` for Xid events.
func WatchHealth(ctx context.Context, file string, every time.Duration) error {
	parent := os.Getppid()
	for ctx.Err() == nil && os.Getppid() == parent {
		start := time.Now()
		rep := readHealth(ctx, every)
		if ctx.Err() != nil {
			// The reads were cut short by the stop ("nvidia-smi: signal:
			// killed"): the last whole report stays the one drover reads.
			return nil
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("agent health: encode report: %w", err)
		}
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("agent health: write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, file); err != nil {
			return fmt.Errorf("agent health: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(every - time.Since(start)):
		}
	}
	return nil
}

// HealthWatchCommand is the argv of the health watch (WatchHealth).
func HealthWatchCommand(binary, file string, every time.Duration) []string {
	return []string{binary, cmdAgent, cmdHealth, "--" + flagWatch, every.String(), "--" + flagOut, file}
}

// healthSMI reads the GPUs and their health through nvidia-smi; why is
// NVML's reason for not answering, kept in the report.
func healthSMI(ctx context.Context, host, why string) gpu.HostReport {
	none := gpu.HostReport{Host: host, Source: gpu.SourceNone, Devices: []gpu.Device{}, Reason: why}
	gpus, err := runTool(ctx, gpu.SMIQueries.GPUs)
	if err != nil && len(gpus) == 0 {
		none.Reason = joinReason(why, "nvidia-smi: "+err.Error())
		return none
	}
	// A lost GPU makes nvidia-smi exit non-zero with a line about it
	// among the rows of the others: keep the rows.
	var rows [][]byte
	for _, l := range bytes.Split(gpus, []byte("\n")) {
		if bytes.Count(l, []byte(",")) == 7 {
			rows = append(rows, l)
		}
	}
	rep, err := gpu.ReportFromSMI(host, gpu.SMIOutputs{GPUs: bytes.Join(rows, []byte("\n"))})
	if err != nil {
		none.Reason = joinReason(why, err.Error())
		return none
	}
	rep.Reason = joinReason(why, rep.Reason)
	out, err := runTool(ctx, gpu.SMIHealthQuery)
	health, lost, perr := gpu.ParseSMIHealth(out)
	switch {
	case perr != nil:
		rep.Reason = joinReason(rep.Reason, "nvidia-smi health: "+perr.Error())
	case err != nil && len(health) == 0 && len(lost) == 0:
		rep.Reason = joinReason(rep.Reason, "nvidia-smi health: "+err.Error())
	default:
		gpu.AddSMIHealth(&rep, health, lost)
	}
	return rep
}

// runTool runs args and returns its standard output, also when it exited
// non-zero (nvidia-smi does when a GPU is lost, and still prints the
// others).
func runTool(ctx context.Context, args []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if msg := strings.TrimSpace(firstLine(stderr.String() + "\n" + stdout.String())); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		if errors.Is(err, exec.ErrNotFound) {
			err = errors.New("not found")
		}
	}
	return stdout.Bytes(), err
}

// addKernelXIDs adds the "NVRM: Xid" lines of the kernel log to rep. The
// log is read whole every time; the controller tells new events from old
// by their Key. Where it cannot be read the report says why, and Xids
// come from NVML's events alone (or not at all without NVML).
func addKernelXIDs(ctx context.Context, rep *gpu.HostReport) {
	out, source, err := kernelLog(ctx)
	if err != nil {
		if rep.XIDSource == "" {
			rep.XIDReason = joinReason(rep.XIDReason, "kernel log: "+err.Error())
		}
		return
	}
	rep.XIDs = append(rep.XIDs, gpu.ParseKernelXIDs(out, rep.Devices)...)
	if rep.XIDSource == "" {
		rep.XIDSource, rep.XIDReason = source, ""
	} else {
		rep.XIDSource += " and " + source
	}
}

// kernelLog returns the kernel log's Xid lines: from /dev/kmsg, else from
// dmesg (which reads the same buffer through syslog(2), and which a host
// may let more users run).
func kernelLog(ctx context.Context) ([]byte, string, error) {
	out, kerr := readKmsg()
	if kerr == nil {
		return out, "kernel log", nil
	}
	out, derr := runTool(ctx, []string{"dmesg", "-r"})
	if derr == nil {
		return dmesgXIDLines(out), "kernel log (dmesg)", nil
	}
	return nil, "", fmt.Errorf("read /dev/kmsg: %v; dmesg: %v (reading it needs root, CAP_SYSLOG or kernel.dmesg_restrict = 0)", kerr, derr)
}

// Only records the kernel itself logged count as Xids: facility 0 (kern;
// what users write to /dev/kmsg gets another), and a message that is the
// driver's Xid from its first byte (gpu.IsKernelXIDMessage). The kernel
// quotes names users choose inside its own messages: a program named
// "NVRM: Xid (PCI:...): 79, ..." that segfaults puts that text in a
// kernel record ("NAME[pid]: segfault at ... in NAME[...]"), and before
// this check such a record fenced the host.

// kmsgXIDRecord is the first line of a /dev/kmsg record
// ("prio,seq,usec,flags;message\n continuation...") when the kernel
// logged it as an Xid.
func kmsgXIDRecord(rec []byte) ([]byte, bool) {
	if i := bytes.IndexByte(rec, '\n'); i >= 0 {
		rec = rec[:i] // the sequence number makes the first line unique
	}
	head, msg, ok := bytes.Cut(rec, []byte(";"))
	if !ok {
		return nil, false
	}
	prio, _, _ := bytes.Cut(head, []byte(","))
	p, err := strconv.Atoi(string(prio))
	if err != nil || p>>3 != 0 || !gpu.IsKernelXIDMessage(string(msg)) {
		return nil, false
	}
	return rec, true
}

// dmesgXIDLines keeps the lines of `dmesg -r` ("<prio>[  12.345]
// message") the kernel logged as Xids.
func dmesgXIDLines(out []byte) []byte {
	var keep bytes.Buffer
	for _, line := range bytes.Split(out, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("<"))
		prio, rest, ok2 := bytes.Cut(rest, []byte(">"))
		p, err := strconv.Atoi(string(prio))
		if !ok || !ok2 || err != nil || p>>3 != 0 {
			continue
		}
		if bytes.HasPrefix(rest, []byte("[")) {
			if i := bytes.IndexByte(rest, ']'); i >= 0 {
				rest = bytes.TrimPrefix(rest[i+1:], []byte(" "))
			}
		}
		if gpu.IsKernelXIDMessage(string(rest)) {
			keep.Write(line)
			keep.WriteByte('\n')
		}
	}
	return keep.Bytes()
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// watchHealth starts the health watch of RunOptions.HealthFile as a
// helper (its own process, so that the nvidia-smi and NVML reader runs it
// makes are its children, not the subreaping agent's) and returns what
// stops it. A watch that cannot start is said once and the command runs
// on: health is drover's concern, not the job's.
func (s *supervision) watchHealth() (stop func()) {
	if s.opts.HealthFile == "" {
		return func() {}
	}
	self, err := os.Executable()
	if err == nil {
		err = os.MkdirAll(filepath.Dir(s.opts.HealthFile), 0o755)
	}
	var cmd *exec.Cmd
	if err == nil {
		every := s.opts.HealthEvery
		if every <= 0 {
			every = DefaultHealthEvery
		}
		args := HealthWatchCommand(self, s.opts.HealthFile, max(every, time.Second))
		cmd = exec.Command(args[0], args[1:]...)
		err = s.g.helpers.start(cmd)
	}
	if err != nil {
		s.notice("GPU health is not watched on this host: %v", err)
		return func() {}
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		s.g.helpers.done(cmd.Process.Pid)
	}
}
