package fleettest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// SlowLink is a network namespace on the fleet's bridge whose one link
// is slow: a token bucket (tc tbf, which this kernel has where netem is
// missing) on both ends of its veth. A controller run inside it (`ip netns
// exec NS drover ...`) reaches the hosts as a laptop far from a fast
// fleet does, while the hosts still reach each other at the bridge's
// speed.
type SlowLink struct {
	// NS is the namespace, for `ip netns exec`.
	NS string
	// Addr is the namespace's address on the fleet's subnet.
	Addr string
	// veth is the link's end on the bridge, in this namespace.
	veth string
}

// SlowLink makes a SlowLink at rate (tc's syntax: "50mbit") named after
// the fleet, with the address .250 of its subnet. Close removes it.
func (f *Fleet) SlowLink(rate string) (*SlowLink, error) {
	octets := strings.Split(f.Hosts[0].Addr, ".")
	if len(octets) != 4 {
		return nil, fmt.Errorf("slow link: fleet address %q is not IPv4", f.Hosts[0].Addr)
	}
	name := f.name()
	l := &SlowLink{NS: "drover-" + name + "-ctl", Addr: strings.Join(octets[:3], ".") + ".250", veth: "dtsl" + octets[2]}
	tbf := []string{"root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms"}
	_ = exec.Command("ip", "netns", "del", l.NS).Run() // left by a crashed run
	steps := [][]string{
		{"ip", "netns", "add", l.NS},
		{"ip", "link", "add", l.veth, "type", "veth", "peer", "name", "eth0", "netns", l.NS},
		{"ip", "link", "set", l.veth, "master", "dtbr" + octets[2], "up"},
		{"ip", "-n", l.NS, "addr", "add", l.Addr + "/24", "dev", "eth0"},
		{"ip", "-n", l.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", l.NS, "link", "set", "lo", "up"},
		append([]string{"tc", "qdisc", "add", "dev", l.veth}, tbf...),
		append([]string{"ip", "netns", "exec", l.NS, "tc", "qdisc", "add", "dev", "eth0"}, tbf...),
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("slow link: %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return l, nil
}

// Bytes is what crossed the link so far, both ways.
func (l *SlowLink) Bytes() (int64, error) {
	var total int64
	for _, dir := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile("/sys/class/net/" + l.veth + "/statistics/" + dir)
		if err != nil {
			return 0, fmt.Errorf("slow link: %w", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("slow link: %s: %w", dir, err)
		}
		total += n
	}
	return total, nil
}

// Close removes the namespace and with it the link.
func (l *SlowLink) Close() error {
	out, err := exec.Command("ip", "netns", "del", l.NS).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such file") {
		return errors.Join(err, errors.New(string(out)))
	}
	return nil
}

// LimitHosts caps what every host sends on the fleet's network at rate
// (tc's syntax: "400mbit"; a token bucket on eth0 inside its namespace),
// as if each host had a NIC of its own that speed: a transfer then takes
// the time its links set rather than the time this machine's shared CPU
// does. Each host receives from one sender at a time in a chain, so
// limiting what hosts send limits every link. "" removes the limits.
func (f *Fleet) LimitHosts(rate string) error {
	f.mu.Lock()
	hosts := append([]Host(nil), f.Hosts...)
	f.mu.Unlock()
	for _, h := range hosts {
		args := []string{"netns", "exec", h.NetNS, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"}
		if rate == "" {
			args = []string{"netns", "exec", h.NetNS, "tc", "qdisc", "del", "dev", "eth0", "root"}
		}
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil && !(rate == "" && strings.Contains(string(out), "No such file")) {
			return fmt.Errorf("limit %s's link to %q: %s: %w: %s", h.Name, rate, strings.Join(args[3:], " "), err, out)
		}
	}
	return nil
}
