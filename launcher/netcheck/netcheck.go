package netcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/peerauth"
	"github.com/droverhq/drover/launcher/plan"
)

// The network check (`drover check net`, preflight = ["net"]): every host
// listens on the interface the job's collectives use (agent net-listen),
// then in N-1 rounds each host measures its link to the host r places
// after it (agent net-send), so that every ordered pair is measured once
// and each host sends and receives once per round. A host's rate is the
// lower of the medians of what it sent and what it received: a slow NIC
// or a throttled port slows every link of its host in one direction,
// while a single slow link leaves its other end's medians alone. No MPI;
// the listeners accept only connections that prove a one-time token that
// went to them over SSH (package peerauth), and listen only on the job's
// interface or the host's address.

// DefaultDuration is how long each link is measured.
const DefaultDuration = 2 * time.Second

// Host is one host of a network check.
type Host struct {
	Name string `json:"host"`
	// Iface is the interface measured ("" when it could not be told:
	// the host's address was used).
	Iface string `json:"iface,omitempty"`
	// Out and In are the medians, in bits per second, of the links the
	// host sent and received on; Rate the lower of the two.
	Out  float64 `json:"out_bits_per_second"`
	In   float64 `json:"in_bits_per_second"`
	Rate float64 `json:"bits_per_second"`
	// RTTMicros is the median round trip of its outgoing links.
	RTTMicros float64 `json:"rtt_us"`
	// Err says why the host could not be measured at all.
	Err string `json:"error,omitempty"`
}

// Link is one measured direction between two hosts.
type Link struct {
	From       string  `json:"from"`
	To         string  `json:"to"`
	BitsPerSec float64 `json:"bits_per_second"`
	RTTMicros  float64 `json:"rtt_us"`
	Err        string  `json:"error,omitempty"`
}

// Report is a network check's result.
type Report struct {
	Hosts []Host `json:"hosts"`
	Links []Link `json:"links"`
	// Slowest is the host with the lowest rate ("" with fewer than two
	// hosts).
	Slowest string `json:"slowest,omitempty"`
}

// netPeer is a host taking part: its connection and its agent.
type netPeer struct {
	host  config.Host
	t     cluster.Transport
	agent string
	iface string
	// addr is where its listener listens, "IP:PORT".
	addr string
}

// checkNet measures the links between peers, each for d.
func checkNet(ctx context.Context, peers []*netPeer, d time.Duration) *Report {
	rep := &Report{}
	if len(peers) < 2 {
		for _, p := range peers {
			rep.Hosts = append(rep.Hosts, Host{Name: p.host.Name, Iface: p.iface, Err: "no other host to measure against"})
		}
		return rep
	}
	token, err := peerauth.NewToken()
	if err != nil {
		for _, p := range peers {
			rep.Hosts = append(rep.Hosts, Host{Name: p.host.Name, Iface: p.iface, Err: err.Error()})
		}
		return rep
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listenErr := startListeners(ctx, peers, token, len(peers)-1)
	n := len(peers)
	links := make([][]Link, n) // by sender
	for r := 1; r < n; r++ {
		var wg sync.WaitGroup
		for i, p := range peers {
			to := peers[(i+r)%n]
			l := Link{From: p.host.Name, To: to.host.Name}
			if listenErr[i] != nil || listenErr[(i+r)%n] != nil {
				l.Err = "not measured: a listener did not start"
				links[i] = append(links[i], l)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := sendOne(ctx, p, to, token, d)
				l.BitsPerSec, l.RTTMicros = res.BitsPerSec, res.RTTMicros
				if err != nil {
					l.Err = err.Error()
				}
				links[i] = append(links[i], l)
			}()
		}
		wg.Wait()
	}
	for _, ls := range links {
		rep.Links = append(rep.Links, ls...)
	}
	rep.summarise(peers, listenErr)
	return rep
}

// startListeners starts net-listen on every peer (accepting n
// measurements) and waits for each to say where it listens; the
// listeners live until ctx ends.
func startListeners(ctx context.Context, peers []*netPeer, token string, n int) []error {
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startListener(ctx, p, token, n)
		}()
	}
	wg.Wait()
	return errs
}

func startListener(ctx context.Context, p *netPeer, token string, n int) error {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := cluster.NewHeadBuffer(4096, nil)
	// Without an interface, the address drover reaches the host at (what
	// the plan gives the collectives): never every address.
	o := agent.NetListenOptions{Iface: p.iface, Listen: plan.HostAddress(p.host), Accept: n, Timeout: 10 * time.Minute}
	if p.iface != "" {
		o.Listen = ""
	}
	proc, err := remote.Client{T: p.t, Path: p.agent}.NetListen(ctx, o, cluster.Cmd{Stdin: inR, Stdout: outW, Stderr: stderr})
	if err != nil {
		return fmt.Errorf("start drover agent net-listen on %s: %w", p.host.Name, err)
	}
	go func() {
		werr := proc.Wait()
		outW.CloseWithError(fmt.Errorf("drover agent net-listen on %s ended: %v %s", p.host.Name, werr, stderr.Quote(4096)))
	}()
	go func() {
		<-ctx.Done()
		inW.Close() // the listener's stdin ends: it exits
	}()
	if _, err := io.WriteString(inW, token+"\n"); err != nil {
		return fmt.Errorf("hand the token to %s: %w", p.host.Name, err)
	}
	line := make(chan firstLine, 1)
	go func() {
		s, err := bufio.NewReader(io.LimitReader(outR, 4096)).ReadString('\n')
		line <- firstLine{line: []byte(s), err: err}
		_, _ = io.Copy(io.Discard, outR)
	}()
	select {
	case l := <-line:
		if l.err != nil {
			return l.err
		}
		addr, ok := strings.CutPrefix(strings.TrimSpace(string(l.line)), agent.ListeningPrefix)
		if !ok {
			return fmt.Errorf("drover agent net-listen on %s said %q, not where it listens", p.host.Name, l.line)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("drover agent net-listen on %s: %w", p.host.Name, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = p.host.Address // no interface named: the address drover reaches it at
		}
		p.addr = net.JoinHostPort(host, port)
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("drover agent net-listen on %s did not start within 30s", p.host.Name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendOne measures the link from p to to.
func sendOne(ctx context.Context, p, to *netPeer, token string, d time.Duration) (agent.NetResult, error) {
	out := cluster.NewHeadBuffer(64<<10, nil)
	stderr := cluster.NewHeadBuffer(4096, nil)
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	o := agent.NetSendOptions{To: to.addr, Duration: d}
	err := remote.Client{T: p.t, Path: p.agent}.NetSend(cctx, o, cluster.Cmd{Stdin: strings.NewReader(token + "\n"), Stdout: out, Stderr: stderr})
	var res agent.NetResult
	if err != nil {
		return res, fmt.Errorf("%s to %s: %w: %s", p.host.Name, to.host.Name, err, stderr.Quote(4096))
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("%s to %s: read drover agent net-send's result %s: %w", p.host.Name, to.host.Name, out.Quote(200), err)
	}
	return res, nil
}

// summarise computes each host's rates and names the slowest.
func (rep *Report) summarise(peers []*netPeer, listenErr []error) {
	for i, p := range peers {
		h := Host{Name: p.host.Name, Iface: p.iface}
		var out, in, rtt []float64
		for _, l := range rep.Links {
			if l.Err != "" {
				continue
			}
			if l.From == h.Name {
				out = append(out, l.BitsPerSec)
				rtt = append(rtt, l.RTTMicros)
			}
			if l.To == h.Name {
				in = append(in, l.BitsPerSec)
			}
		}
		h.Out, h.In, h.RTTMicros = median(out), median(in), median(rtt)
		h.Rate = min(h.Out, h.In)
		switch {
		case listenErr[i] != nil:
			h.Err = listenErr[i].Error()
		case len(out) == 0 || len(in) == 0:
			h.Err = "no link to or from it could be measured (see the links)"
		}
		rep.Hosts = append(rep.Hosts, h)
	}
	for _, h := range rep.Hosts {
		if rep.Slowest == "" || h.Rate < rep.HostNamed(rep.Slowest).Rate {
			rep.Slowest = h.Name
		}
	}
}

// HostNamed is the report of host name.
func (rep *Report) HostNamed(name string) Host {
	for _, h := range rep.Hosts {
		if h.Name == name {
			return h
		}
	}
	return Host{}
}

// Below lists the hosts whose rate is under minBPS, or which could not
// be measured: the ones min_bandwidth and preflight keep out.
func (rep *Report) Below(minBPS float64) []Host {
	var out []Host
	for _, h := range rep.Hosts {
		if h.Err != "" || (minBPS > 0 && h.Rate < minBPS) {
			out = append(out, h)
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// firstLine is a listener's first line, or why reading it failed.
type firstLine struct {
	line []byte
	err  error
}
