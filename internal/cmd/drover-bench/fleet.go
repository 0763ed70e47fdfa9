package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/droverhq/drover/internal/fleettest"
)

// benchFleet is a test fleet plus what the OpenSSH baselines need to reach
// it the same way drover does: the same user, key and strict known_hosts.
type benchFleet struct {
	*fleettest.Fleet
	N int
	// SSHConfig is an ssh_config file for ssh, pdsh and rsync.
	SSHConfig string
	// cpu holds the hosts' sshd, for their CPU time (nil: no cgroup
	// accounting here; sshdCPU falls back to the listeners' cutime).
	cpu *cpuGroup
}

// benchShell is the bench fleet's login shell: bash, as on Ubuntu and most
// real hosts, which costs sshd's sessions more than dash (/bin/sh) does.
const benchShell = "/bin/bash"

// fleetOptions names the fleet of size n: "<prefix><N>" on the given
// subnet (a default run owns 20..22).
func fleetOptions(prefix string, subnet, n int, tmpfsHomes bool) fleettest.Options {
	return fleettest.Options{Name: fmt.Sprintf("%s%d", prefix, n), N: n, Subnet: subnet, TmpfsHomes: tmpfsHomes, Shell: benchShell}
}

// upFleet brings a fleet up and writes its ssh_config. The caller closes it.
func upFleet(opts fleettest.Options) (*benchFleet, error) {
	f, err := fleettest.Up(opts)
	if err != nil {
		return nil, err
	}
	bf := &benchFleet{Fleet: f, N: opts.N, SSHConfig: filepath.Join(f.Dir, "bench_ssh_config")}
	if err := os.WriteFile(bf.SSHConfig, []byte(sshConfig(f.User, f.KeyFile, f.KnownHosts)), 0o644); err != nil {
		f.Close()
		return nil, fmt.Errorf("write ssh config for fleet %s: %w", opts.Name, err)
	}
	if pids, err := bf.listenerPids(); err == nil {
		bf.cpu, _ = newCPUGroup("drover-bench-"+opts.Name, pids)
	}
	return bf, nil
}

// Close removes the ssh_config written beside the fleet, then tears the
// fleet down, so that its directory goes too.
func (f *benchFleet) Close() error {
	_ = os.Remove(f.SSHConfig)
	err := f.Fleet.Close()
	if f.cpu != nil {
		f.cpu.remove()
	}
	return err
}

// sshConfig gives OpenSSH what drover's inventory gives drover. Host keys
// are checked strictly, as drover does; no connection sharing, since drover
// does not keep connections between commands either.
func sshConfig(user, key, knownHosts string) string {
	return fmt.Sprintf(`Host *
  User %s
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  UpdateHostKeys no
  BatchMode yes
  ControlMaster no
  ControlPath none
  LogLevel ERROR
`, user, key, knownHosts)
}

// Addrs is every host's address, in inventory order.
func (f *benchFleet) Addrs() []string {
	out := make([]string, len(f.Hosts))
	for i, h := range f.Hosts {
		out[i] = h.Addr
	}
	return out
}

// pdshEnv makes pdsh's ssh module use the fleet's ssh_config. pdsh's
// default arguments carry "-l%u" (the local user); leaving it out lets the
// config's User apply.
func (f *benchFleet) pdshEnv() []string {
	return []string{"PDSH_SSH_ARGS=-F " + f.SSHConfig + " -x %h", "PDSH_RCMD_TYPE=ssh"}
}

// home is host i's home directory as seen from this machine: testfleet
// keeps each host's private /home/drovertest under its directory, so the
// harness resets remote state without a network round trip.
func (f *benchFleet) home(i int) string {
	return filepath.Join(f.Dir, "hosts", f.Hosts[i].Name, "home")
}

// removeEverywhere deletes dir (relative to the login home) on every host.
func (f *benchFleet) removeEverywhere(dir string) error {
	if dir == "" || strings.Contains(dir, "..") || filepath.IsAbs(dir) {
		return fmt.Errorf("refusing to remove %q on every host", dir)
	}
	for i := range f.Hosts {
		if err := os.RemoveAll(filepath.Join(f.home(i), dir)); err != nil {
			return fmt.Errorf("reset %s on %s: %w", dir, f.Hosts[i].Name, err)
		}
	}
	return nil
}
