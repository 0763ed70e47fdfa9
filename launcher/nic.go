package launcher

import (
	"context"
	"regexp"
	"strings"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/plan"
)

// ifaceScript prints the name of the host's network interface that reaches
// $1 (an IP or a name, resolved on the host): the interface holding the
// address when it is the host's own, else the one its route goes out of.
// It prints nothing where it cannot tell (no ip command).
const ifaceScript = `a=$1
ip=$(getent ahostsv4 "$a" 2>/dev/null | awk 'NR == 1 { print $1 }')
[ -n "$ip" ] || ip=$a
command -v ip >/dev/null 2>&1 || exit 0
dev=$(ip -o addr show to "$ip" 2>/dev/null | awk '{ print $2; exit }')
[ -n "$dev" ] || dev=$(ip route get "$ip" 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
printf '%s\n' "$dev"`

// ifaceNameRE is what a Linux interface name may look like.
var ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

// DiscoverIfaces asks each host, in parallel, which of its network
// interfaces reaches addr (the rendezvous address, Plan.RendezvousAddr),
// and returns them by host name for PlanInput.Ifaces. A host where it
// cannot tell (no ip command, the command failed) is left out: its
// collectives then choose for themselves, as without drover. addr "" asks
// nothing.
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

func discoverIface(ctx context.Context, t cluster.Transport, addr string) string {
	var stdout strings.Builder
	p, err := t.Start(ctx, cluster.Cmd{Args: []string{"sh", "-c", ifaceScript, "sh", addr}, Stdout: &stdout})
	if err != nil || p.Wait() != nil {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "@")
	if !ifaceNameRE.MatchString(name) {
		return ""
	}
	return name
}

// withIfaces plans again with the interface each host uses to reach the
// plan's rendezvous address, found on the hosts; the first plan tells which
// address that is. Unchanged when no host could tell.
func (a *attempt_) withIfaces(ctx context.Context, conns []*hostConn, in *plan.PlanInput, pl *plan.Plan) (*plan.Plan, error) {
	ts := make([]cluster.Transport, len(conns))
	for i, c := range conns {
		ts[i] = c.t
	}
	in.Ifaces = DiscoverIfaces(ctx, ts, pl.RendezvousAddr())
	if len(in.Ifaces) == 0 {
		return pl, nil
	}
	return plan.Build(*in)
}
