package agent

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
)

// PreflightCommand returns the argv of `drover agent preflight`, which drover
// runs on each host (in the job's workdir, with its env) before starting
// anything, so that a missing program or a taken port fails the attempt
// with a clear message instead of as a crash of one rank. With movePorts,
// taken ports do not fail it: the agent prints FreePortsPrefix and the
// first of as many consecutive free ports instead (see FreePorts).
func PreflightCommand(binary, program string, ports []string, movePorts bool) []string {
	args := []string{binary, "agent", "preflight"}
	for _, p := range ports {
		args = append(args, "--port", p)
	}
	if movePorts {
		args = append(args, "--move-ports")
	}
	return append(args, "--", program)
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
