package sweep

import (
	"fmt"
	"slices"
	"strings"
)

// HostGPUs is one host's GPUs, by index: in an inventory, those a trial
// may take.
type HostGPUs struct {
	Host string `json:"host"`
	GPUs []int  `json:"gpus"`
}

// Placement is where a trial runs: one host and the GPUs pinned to it,
// or, for --hosts-per-trial K, K hosts with their GPUs (the trial's run
// is a group of K hosts).
type Placement struct {
	Hosts []HostGPUs
}

// On places a trial on one host.
func On(host string, gpus ...int) Placement {
	return Placement{Hosts: []HostGPUs{{Host: host, GPUs: gpus}}}
}

// Host is the first host, which a one-host trial runs on.
func (p Placement) Host() string {
	if len(p.Hosts) == 0 {
		return ""
	}
	return p.Hosts[0].Host
}

// String is "host:0,1", and "h0:0,1+h1:0,1" for several hosts.
func (p Placement) String() string {
	var parts []string
	for _, h := range p.Hosts {
		s := h.Host + ":"
		for i, g := range h.GPUs {
			if i > 0 {
				s += ","
			}
			s += fmt.Sprint(g)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "+")
}

// Shape is what a trial asks for: GPUs on each of Hosts hosts.
type Shape struct {
	GPUs  int
	Hosts int
}

// Placer decides where the next trial runs, given the free GPUs of the
// fleet in host order: ok is false when fewer than want.Hosts hosts have
// want.GPUs free.
type Placer interface {
	Place(free []HostGPUs, want Shape) (p Placement, ok bool)
}

// Pack is the default Placer: the hosts with the fewest free GPUs that
// still have want.GPUs (the first such in host order), taking their
// lowest free indices, so trials fill hosts before spreading and a later
// trial that needs more GPUs still finds a host with room.
type Pack struct{}

// Place implements Placer.
func (Pack) Place(free []HostGPUs, want Shape) (Placement, bool) {
	k := max(want.Hosts, 1)
	var fit []HostGPUs
	for _, h := range free {
		if len(h.GPUs) >= want.GPUs {
			fit = append(fit, h)
		}
	}
	if len(fit) < k || want.GPUs < 1 {
		return Placement{}, false
	}
	slices.SortStableFunc(fit, func(a, b HostGPUs) int { return len(a.GPUs) - len(b.GPUs) })
	var p Placement
	for _, h := range fit[:k] {
		g := slices.Clone(h.GPUs)
		slices.Sort(g)
		p.Hosts = append(p.Hosts, HostGPUs{Host: h.Host, GPUs: g[:want.GPUs]})
	}
	return p, true
}

// CheckFits refuses a shape no trial could ever start with:
// --gpus-per-trial larger than every host's GPUs, --hosts-per-trial more
// than the hosts that have that many.
func CheckFits(fleet []HostGPUs, want Shape) error {
	most, hosts := 0, 0
	for _, h := range fleet {
		most = max(most, len(h.GPUs))
		if len(h.GPUs) >= want.GPUs {
			hosts++
		}
	}
	switch {
	case want.GPUs < 1:
		return errorf("--gpus-per-trial", "give each trial one GPU or more: --gpus-per-trial 1", "--gpus-per-trial %d is not a number of GPUs", want.GPUs)
	case want.GPUs > most:
		return errorf("--gpus-per-trial", fmt.Sprintf("ask for at most %d, or add a host with %d GPUs", most, want.GPUs),
			"--gpus-per-trial %d is more than any host has (the most is %d)", want.GPUs, most)
	case want.Hosts < 1:
		return errorf("--hosts-per-trial", "give each trial one host or more: --hosts-per-trial 1", "--hosts-per-trial %d is not a number of hosts", want.Hosts)
	case want.Hosts > hosts:
		return errorf("--hosts-per-trial", fmt.Sprintf("ask for at most %d, or fewer GPUs per host with --gpus-per-trial", hosts),
			"--hosts-per-trial %d is more than the hosts with %d free GPU(s) (there are %d)", want.Hosts, want.GPUs, hosts)
	}
	return nil
}

// Ledger is the sweep's own account of the GPUs its trials may take:
// what the fleet has, which trial holds each GPU, the GPUs that other
// runs lease (as the last look at the hosts' leases found them) and the
// hosts the sweep has given up on. It keeps two of the sweep's trials off
// one GPU whatever the hosts report (a trial may not have leased its GPU
// yet when the next is placed), and a trial off a GPU another run leases.
type Ledger struct {
	fleet   []HostGPUs
	held    map[string]map[int]string // host → GPU → trial id
	blocked map[string]map[int]bool   // host → GPU leased by another run
	out     map[string]bool           // hosts lost for the rest of the sweep
}

// NewLedger starts an account of fleet with nothing held.
func NewLedger(fleet []HostGPUs) *Ledger {
	return &Ledger{fleet: fleet, held: map[string]map[int]string{}, blocked: map[string]map[int]bool{}, out: map[string]bool{}}
}

// Free returns each host's GPUs that no trial holds, no other run leases
// and whose host is not out, in host order.
func (l *Ledger) Free() []HostGPUs {
	var out []HostGPUs
	for _, h := range l.fleet {
		if l.out[h.Host] {
			continue
		}
		f := HostGPUs{Host: h.Host}
		for _, g := range h.GPUs {
			if _, taken := l.held[h.Host][g]; !taken && !l.blocked[h.Host][g] {
				f.GPUs = append(f.GPUs, g)
			}
		}
		out = append(out, f)
	}
	return out
}

// Available records the GPUs a fresh look at the hosts found free (not
// busy, leased by no run): every other GPU of the fleet that no trial
// of the sweep holds is another run's until the next look. (The sweep's
// own trials lease their GPUs too, so the look finds those leased.)
func (l *Ledger) Available(avail []HostGPUs) {
	free := map[string]map[int]bool{}
	for _, h := range avail {
		free[h.Host] = map[int]bool{}
		for _, g := range h.GPUs {
			free[h.Host][g] = true
		}
	}
	l.blocked = map[string]map[int]bool{}
	for _, h := range l.fleet {
		for _, g := range h.GPUs {
			if _, ours := l.held[h.Host][g]; !ours && !free[h.Host][g] {
				l.block(h.Host, g)
			}
		}
	}
}

// Block records that another run leases p's GPUs (a trial placed there
// found them leased), until the next Available.
func (l *Ledger) Block(p Placement) {
	for _, h := range p.Hosts {
		for _, g := range h.GPUs {
			l.block(h.Host, g)
		}
	}
}

func (l *Ledger) block(host string, g int) {
	if l.blocked[host] == nil {
		l.blocked[host] = map[int]bool{}
	}
	l.blocked[host][g] = true
}

// Blocked says whether another run leases any GPU of the fleet, as far
// as the sweep knows: then a look at the hosts may find more free.
func (l *Ledger) Blocked() bool {
	for h, gs := range l.blocked {
		if len(gs) > 0 && !l.out[h] {
			return true
		}
	}
	return false
}

// MarkOut gives up on host for the rest of the sweep: a trial's run
// there found it lost. (A host that went away once in a sweep of hours
// is likely to again; its trials move to the others.)
func (l *Ledger) MarkOut(host string) { l.out[host] = true }

// Fits says whether a trial of shape want could start once the sweep's
// own trials and the other runs let go: enough hosts not out have the
// GPUs.
func (l *Ledger) Fits(want Shape) bool {
	n := 0
	for _, h := range l.fleet {
		if !l.out[h.Host] && len(h.GPUs) >= want.GPUs {
			n++
		}
	}
	return n >= max(want.Hosts, 1)
}

// Take records that trial holds p; it refuses a GPU already held, which
// would be a Placer's defect.
func (l *Ledger) Take(trial string, p Placement) error {
	for _, h := range p.Hosts {
		for _, g := range h.GPUs {
			if who, taken := l.held[h.Host][g]; taken {
				return fmt.Errorf("GPU %d of %s is held by trial %s; trial %s cannot take it", g, h.Host, who, trial)
			}
		}
	}
	for _, h := range p.Hosts {
		if l.held[h.Host] == nil {
			l.held[h.Host] = map[int]string{}
		}
		for _, g := range h.GPUs {
			l.held[h.Host][g] = trial
		}
	}
	return nil
}

// Release frees every GPU trial holds.
func (l *Ledger) Release(trial string) {
	for _, gs := range l.held {
		for g, who := range gs {
			if who == trial {
				delete(gs, g)
			}
		}
	}
}

// Missing is the hosts of p that look does not list: after a trial of
// several hosts lost one without saying which, those that no longer
// answer (a look leaves out a host it could not reach).
func Missing(p Placement, look []HostGPUs) []string {
	var out []string
	for _, h := range p.Hosts {
		if !slices.ContainsFunc(look, func(l HostGPUs) bool { return l.Host == h.Host }) {
			out = append(out, h.Host)
		}
	}
	return out
}

// Merge returns fleet with the GPUs of ps added where it lacks them (a
// host it lacks at the end): a resumed sweep's adopted trials hold their
// GPUs through their runs' leases and processes, so a look at the hosts
// shows them leased or busy, yet they are the sweep's own, to be placed
// on once those trials end. fleet is not changed.
func Merge(fleet []HostGPUs, ps ...Placement) []HostGPUs {
	out := make([]HostGPUs, len(fleet))
	for i, h := range fleet {
		out[i] = HostGPUs{Host: h.Host, GPUs: slices.Clone(h.GPUs)}
	}
	for _, p := range ps {
		for _, h := range p.Hosts {
			i := slices.IndexFunc(out, func(o HostGPUs) bool { return o.Host == h.Host })
			if i < 0 {
				out = append(out, HostGPUs{Host: h.Host})
				i = len(out) - 1
			}
			for _, g := range h.GPUs {
				if !slices.Contains(out[i].GPUs, g) {
					out[i].GPUs = append(out[i].GPUs, g)
				}
			}
			slices.Sort(out[i].GPUs)
		}
	}
	return out
}
