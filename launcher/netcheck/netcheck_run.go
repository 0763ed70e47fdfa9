package netcheck

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

// Options say which hosts `drover check net` measures, and how.
type Options struct {
	Job   config.Job
	Hosts []config.Host
	Dial  cluster.DialOptions
	// Bin is the drover binary whose directory holds the agents.
	Bin string
	// Duration is how long each link is measured (DefaultDuration
	// when 0).
	Duration time.Duration
}

// Run is `drover check net`: it dials the hosts, installs the agent
// and measures every link between them over the interface the job's
// collectives use. A host that cannot be dialled or prepared is in the
// report with its error.
func Run(ctx context.Context, o Options) *Report {
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	ts, errs := cluster.DialAll(ctx, config.Endpoints(o.Hosts), o.Dial)
	agents := remote.FindAgents(o.Bin)
	peers := make([]*netPeer, len(o.Hosts))
	var wg sync.WaitGroup
	for i, h := range o.Hosts {
		if errs[i] != nil {
			continue
		}
		defer ts[i].Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			bin, err := remote.Install(ctx, ts[i], agents)
			if err != nil {
				errs[i] = err
				return
			}
			peers[i] = &netPeer{host: h, t: ts[i], agent: bin}
		}()
	}
	wg.Wait()
	var up []*netPeer
	for _, p := range peers {
		if p != nil {
			up = append(up, p)
		}
	}
	setIfaces(ctx, o.Job, up)
	rep := checkNet(ctx, up, o.Duration)
	for i, h := range o.Hosts {
		if errs[i] != nil {
			rep.Hosts = append(rep.Hosts, Host{Name: h.Name, Err: errs[i].Error()})
		}
	}
	return rep
}

// Measure measures the links between conns, whose agents are installed,
// each for d, over the interface the job's collectives use: a run's
// preflight = ["net"] (package launcher), over the run's connections.
func Measure(ctx context.Context, job config.Job, conns []hostio.Conn, d time.Duration) *Report {
	peers := make([]*netPeer, len(conns))
	for i, c := range conns {
		peers[i] = &netPeer{host: c.Host, t: c.T, agent: c.AgentPath}
	}
	setIfaces(ctx, job, peers)
	return checkNet(ctx, peers, d)
}

// setIfaces finds, per peer, the interface the job's collectives use:
// the one [job.env] names in NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME,
// else the one that reaches the rendezvous host (what the plan puts in
// those variables, see DiscoverIfaces).
func setIfaces(ctx context.Context, job config.Job, peers []*netPeer) {
	if ifc := namedIface(job.Env); ifc != "" {
		for _, p := range peers {
			p.iface = ifc
		}
		return
	}
	if len(peers) == 0 || job.Framework == config.TensorFlow {
		return // tensorflow's tasks connect to each other: no one route
	}
	ts := make([]cluster.Transport, len(peers))
	for i, p := range peers {
		ts[i] = p.t
	}
	rdzv := peers[0].host.Address // the plan's MASTER_ADDR: its first host that is no spare
	for i := len(peers) - 1; i >= 0; i-- {
		if !peers[i].host.Spare {
			rdzv = peers[i].host.Address
		}
	}
	found := hostio.DiscoverIfaces(ctx, ts, rdzv)
	for _, p := range peers {
		p.iface = found[p.host.Name]
	}
}

// namedIface is the single interface the user's env pins the
// collectives to ("eth0" of "=eth0" or "eth0,eth1"), "" when it names
// none or excludes ("^docker").
func namedIface(env map[string]string) string {
	for _, k := range []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} {
		v := strings.TrimPrefix(strings.TrimSpace(env[k]), "=")
		if v == "" || strings.HasPrefix(v, "^") {
			continue
		}
		first, _, _ := strings.Cut(v, ",")
		if hostio.ValidIfaceName(first) {
			return first
		}
	}
	return ""
}

// CheckMinBandwidth is the error naming the hosts a report fails:
// unmeasured ones, and those under minBPS when positive; nil when none.
func CheckMinBandwidth(rep *Report, minBPS float64) error {
	bad := rep.Below(minBPS)
	if len(bad) == 0 {
		return nil
	}
	parts := make([]string, len(bad))
	for i, h := range bad {
		if h.Err != "" {
			parts[i] = fmt.Sprintf("%s could not be measured: %s", h.Name, h.Err)
			continue
		}
		parts[i] = fmt.Sprintf("%s runs at %s (out %s, in %s), below min_bandwidth %s",
			h.Name, config.FormatBandwidth(h.Rate), config.FormatBandwidth(h.Out), config.FormatBandwidth(h.In), config.FormatBandwidth(minBPS))
	}
	return &SlowError{Hosts: bad, msg: strings.Join(parts, "; ")}
}

// SlowError is a network check that found hosts too slow or unmeasurable.
type SlowError struct {
	Hosts []Host
	msg   string
}

func (e *SlowError) Error() string {
	return "network check: " + e.msg + " (fix: check the host's NIC speed (ethtool), cabling and switch port, or lower min_bandwidth)"
}
