package hostio

import (
	"context"
	"regexp"
	"strings"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
)

// ifaceNameRE is what a Linux interface name may look like.
var ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

// ValidIfaceName reports whether name looks like a Linux interface name:
// a host's answer or a job's environment is checked before it is used.
func ValidIfaceName(name string) bool { return ifaceNameRE.MatchString(name) }

// DiscoverIfaces asks each host, in parallel, which of its network
// interfaces reaches addr (the rendezvous address, Plan.RendezvousAddr),
// and returns them by host name for PlanInput.Ifaces. A host where it
// cannot tell (no ip command, the command failed) is left out: its
// collectives then choose for themselves, as without drover. addr "" asks
// nothing. It runs agent.IfaceScript over the transport, needing no agent
// (`drover plan`); `drover run` asks the agent, in its preflight.
func DiscoverIfaces(ctx context.Context, ts []cluster.Transport, addr string) map[string]string {
	out := map[string]string{}
	if addr == "" {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ifc := discoverIface(ctx, t, addr); ifc != "" {
				mu.Lock()
				out[t.Host().Name] = ifc
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// ifaceOutput bounds what is read of IfaceScript's answer (one interface
// name): a host printing more is stopped there and left out.
const ifaceOutput = 4 << 10

func discoverIface(ctx context.Context, t cluster.Transport, addr string) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdout := cluster.NewHeadBuffer(ifaceOutput, cancel)
	p, err := t.Start(ctx, cluster.Cmd{Args: []string{"sh", "-c", agent.IfaceScript, "sh", addr}, Stdout: stdout})
	if err != nil || p.Wait() != nil || stdout.More() > 0 {
		return ""
	}
	return IfaceName(string(stdout.Bytes()))
}

// IfaceName is the interface name in what IfaceScript printed ("eth0",
// "eth0@if12" for a veth), "" when it does not look like one.
func IfaceName(out string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(out), "@")
	if !ifaceNameRE.MatchString(name) {
		return ""
	}
	return name
}
