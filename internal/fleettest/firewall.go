package fleettest

import (
	"fmt"
	"os/exec"
	"strings"
)

// sshPort is the port every host's sshd listens on (the inventory's).
const sshPort = "22"

// Firewall makes host to drop every TCP connection that host from opens
// to it, except to sshd: an iptables DROP rule in to's namespace, as a
// site firewall that lets SSH in but not the ports a job's hosts open
// for each other. The connection attempts hang until their own timeout,
// as through a real firewall; the controller's SSH is untouched. The
// returned func removes the rule.
func (f *Fleet) Firewall(to, from int) (func() error, error) {
	f.mu.Lock()
	err := f.check(to)
	if err == nil {
		err = f.check(from)
	}
	var ns, src string
	if err == nil {
		ns, src = f.Hosts[to].NetNS, f.Hosts[from].Addr
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rule := []string{"INPUT", "-s", src, "-p", "tcp", "!", "--dport", sshPort, "-j", "DROP"}
	ipt := func(op string) error {
		// -w: the rule table's lock is shared with every other namespace.
		args := append([]string{"netns", "exec", ns, "iptables", "-w", "10", op}, rule...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("firewall in %s: iptables %s %s: %w: %s", ns, op, strings.Join(rule, " "), err, out)
		}
		return nil
	}
	if err := ipt("-A"); err != nil {
		return nil, err
	}
	return func() error { return ipt("-D") }, nil
}
