package agent

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
)

// PreflightCommand returns the argv of `drover agent preflight`, which drover
// runs on each host (in the job's workdir, with its env) before starting
// anything, so that a missing program or a taken port fails the attempt
// with a clear message instead of as a crash of one rank.
func PreflightCommand(binary, program string, ports []string) []string {
	args := []string{binary, "agent", "preflight"}
	for _, p := range ports {
		args = append(args, "--port", p)
	}
	return append(args, "--", program)
}

// Preflight checks that program can be executed from the current directory
// with the current PATH, and that every TCP port can be listened on. All
// problems are reported, joined.
func Preflight(program string, ports []string) error {
	var errs []error
	if program != "" {
		if _, err := exec.LookPath(program); err != nil {
			errs = append(errs, fmt.Errorf("program %s: %w", program, err))
		}
	}
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
