package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PreflightOptions say what `drover agent preflight` checks.
type PreflightOptions struct {
	// Program must be found from the current directory and PATH; ""
	// checks none (a host with no process of the job).
	Program string
	// Ports must be free.
	Ports []string
	// MovePorts: taken ports do not fail the check; the agent prints
	// FreePortsPrefix and the first of as many consecutive free ports
	// instead (see FreePorts).
	MovePorts bool
	// Leftovers, when set, is a directory of pidfiles (the workdir's
	// .drover/pids): every group they name that still runs is stopped
	// first (StopLeftovers, with Grace), and each one stopped is printed
	// after LeftoverPrefix. The check then sees the ports those groups
	// held free.
	Leftovers string
	Grace     time.Duration
	// Lease and LeaseID, when set, are the workdir's lease file and the
	// run id of the drover asking: the leftovers are stopped only while
	// the lease is that run's, checked on the host just before (a run
	// whose workdir another run took over with --force would otherwise
	// stop the new run's group as leftovers). Otherwise the agent prints
	// LeaseTakenPrefix and the lease, and fails.
	Lease, LeaseID string
	// RouteTo, when set, asks which of the host's network interfaces
	// reaches this address (IfaceScript); the agent prints it after
	// IfacePrefix, or nothing where it cannot tell.
	RouteTo string
}

// PreflightCommand returns the argv of `drover agent preflight`, which
// drover runs on each host (in the job's workdir, with its env) before
// starting anything, so that a missing program or a taken port fails the
// attempt with a clear message instead of as a crash of one rank. One
// command stops the leftovers and checks, so that a host answers both in
// one exchange.
func PreflightCommand(binary string, o PreflightOptions) []string {
	args := []string{binary, cmdAgent, cmdPreflight}
	if o.Leftovers != "" {
		args = append(args, "--"+flagStopLeftovers, o.Leftovers)
		if o.Grace > 0 {
			args = append(args, "--"+flagGrace, o.Grace.String())
		}
		if o.Lease != "" {
			args = append(args, "--"+flagLease, o.Lease, "--"+flagLeaseID, o.LeaseID)
		}
	}
	if o.RouteTo != "" {
		args = append(args, "--"+flagRouteTo, o.RouteTo)
	}
	for _, p := range o.Ports {
		args = append(args, "--"+flagPort, p)
	}
	if o.MovePorts {
		args = append(args, "--"+flagMovePorts)
	}
	args = append(args, "--")
	if o.Program != "" {
		args = append(args, o.Program)
	}
	return args
}

// IfacePrefix starts the line `drover agent preflight --route-to ADDR`
// prints: "iface: NAME".
const IfacePrefix = "iface: "

// IfaceScript prints the name of the host's network interface that
// reaches $1 (an IP or a name, resolved on the host): the interface
// holding the address when it is the host's own, else the one its route
// goes out of. It prints nothing where it cannot tell (no ip command).
// drover runs it over the transport where no agent is installed (`drover
// plan`), and the agent runs it for `drover run` (RouteIface).
const IfaceScript = `a=$1
ip=$(getent ahostsv4 "$a" 2>/dev/null | awk 'NR == 1 { print $1 }')
[ -n "$ip" ] || ip=$a
command -v ip >/dev/null 2>&1 || exit 0
dev=$(ip -o addr show to "$ip" 2>/dev/null | awk '{ print $2; exit }')
[ -n "$dev" ] || dev=$(ip route get "$ip" 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
printf '%s\n' "$dev"`

// RouteIface runs IfaceScript for addr here; "" where it cannot tell.
// The caller checks that the answer looks like an interface name.
func RouteIface(ctx context.Context, addr string) string {
	out, err := exec.CommandContext(ctx, "sh", "-c", IfaceScript, "sh", addr).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// LeftoverPrefix starts each line `drover agent preflight --stop-leftovers`
// prints about a leftover group it stopped.
const LeftoverPrefix = "leftover: "

// LeaseTakenPrefix starts the line `drover agent preflight --lease FILE
// --lease-id ID` prints when FILE is not ID's lease: what the lease holds
// (the target of the link, "" when there is none).
const LeaseTakenPrefix = "lease-taken: "

// CheckLease reports whether the lease link file holds run id's lease,
// and what it holds: a lease is a link whose target is JSON with the
// holder's "id" (see package lease).
func CheckLease(file, id string) (ours bool, holds string) {
	cur, err := os.Readlink(file)
	if err != nil {
		return false, ""
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(cur), &o) != nil {
		return false, cur
	}
	return o.ID == id, cur
}

// FreePortsPrefix starts the line `drover agent preflight --move-ports`
// prints when the ports it was given are taken: "free-ports: BASE".
const FreePortsPrefix = "free-ports: "

// Preflight checks that program can be executed from the current directory
// with the current PATH, and that every TCP port can be listened on. All
// problems are reported, joined.
func Preflight(program string, ports []string) error {
	return errors.Join(checkProgram(program), checkPorts(ports))
}

// PreflightMove is Preflight for a restart: when a port is taken (the
// previous attempt's rendezvous port still held), it returns the first of
// len(ports) consecutive free ports instead of failing; 0 when all were
// free.
func PreflightMove(program string, ports []string) (int, error) {
	if err := checkProgram(program); err != nil {
		return 0, err
	}
	if checkPorts(ports) == nil {
		return 0, nil
	}
	return FreePorts(len(ports))
}

func checkProgram(program string) error {
	if program == "" {
		return nil
	}
	if _, err := exec.LookPath(program); err != nil {
		return fmt.Errorf("program %s: %w", program, err)
	}
	return nil
}

func checkPorts(ports []string) error {
	var errs []error
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("", p))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %s is not free: %w", p, err))
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}

// FreePorts finds n consecutive TCP ports that can be listened on, starting
// from one the kernel picks, and returns the first.
func FreePorts(n int) (int, error) {
	var last error
	for range 50 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+n-1 > 65535 {
			continue
		}
		ports := make([]string, n)
		for i := range ports {
			ports[i] = strconv.Itoa(base + i)
		}
		if last = checkPorts(ports); last == nil {
			return base, nil
		}
	}
	return 0, fmt.Errorf("find %d consecutive free ports: %w", n, last)
}

// StopLeftovers stops the group of every pidfile (*.pid) in dir that still
// runs (StopLeftover) and returns what it stopped; a missing dir means
// nothing ever ran there.
func StopLeftovers(ctx context.Context, dir string, grace time.Duration) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stop leftovers: %w", err)
	}
	var stopped []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		msg, err := StopLeftover(ctx, filepath.Join(dir, e.Name()), grace)
		if err != nil {
			return stopped, err
		}
		if msg != "" {
			stopped = append(stopped, msg)
		}
	}
	return stopped, nil
}
