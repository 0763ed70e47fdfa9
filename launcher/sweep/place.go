package sweep

import (
	"fmt"
	"slices"
)

// HostGPUs is one host's GPUs, by index: in an inventory, those a trial
// may take.
type HostGPUs struct {
	Host string
	GPUs []int
}

// Placement is where a trial runs: one host and the GPUs pinned to it.
type Placement struct {
	Host string
	GPUs []int
}

func (p Placement) String() string {
	s := p.Host + ":"
	for i, g := range p.GPUs {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(g)
	}
	return s
}

// Placer decides where the next trial runs, given the free GPUs of the
// fleet in host order: ok is false when no host has n free. It is the
// seam at which per-GPU leases on the hosts take over from the sweep's
// own Ledger.
type Placer interface {
	Place(free []HostGPUs, n int) (p Placement, ok bool)
}

// Pack is the default Placer: the host with the fewest free GPUs that
// still has n (the first such in host order), taking its lowest free
// indices, so trials fill hosts before spreading and a later trial that
// needs more GPUs still finds a host with room.
type Pack struct{}

// Place implements Placer.
func (Pack) Place(free []HostGPUs, n int) (Placement, bool) {
	best := -1
	for i, h := range free {
		if len(h.GPUs) >= n && (best < 0 || len(h.GPUs) < len(free[best].GPUs)) {
			best = i
		}
	}
	if best < 0 || n < 1 {
		return Placement{}, false
	}
	g := slices.Clone(free[best].GPUs)
	slices.Sort(g)
	return Placement{Host: free[best].Host, GPUs: g[:n]}, true
}

// CheckFits refuses --gpus-per-trial n larger than every host's GPUs: no
// trial could ever start.
func CheckFits(fleet []HostGPUs, n int) error {
	most := 0
	for _, h := range fleet {
		most = max(most, len(h.GPUs))
	}
	if n < 1 {
		return errorf("--gpus-per-trial", "give each trial one GPU or more: --gpus-per-trial 1", "--gpus-per-trial %d is not a number of GPUs", n)
	}
	if n > most {
		return errorf("--gpus-per-trial", fmt.Sprintf("ask for at most %d, or add a host with %d GPUs", most, n),
			"--gpus-per-trial %d is more than any host has (the most is %d)", n, most)
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
	for _, g := range p.GPUs {
		l.block(p.Host, g)
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

// Fits says whether a trial of n GPUs could start once the sweep's own
// trials and the other runs let go: some host not out has n GPUs.
func (l *Ledger) Fits(n int) bool {
	for _, h := range l.fleet {
		if !l.out[h.Host] && len(h.GPUs) >= n {
			return true
		}
	}
	return false
}

// Take records that trial holds p; it refuses a GPU already held, which
// would be a Placer's defect.
func (l *Ledger) Take(trial string, p Placement) error {
	for _, g := range p.GPUs {
		if who, taken := l.held[p.Host][g]; taken {
			return fmt.Errorf("GPU %d of %s is held by trial %s; trial %s cannot take it", g, p.Host, who, trial)
		}
	}
	if l.held[p.Host] == nil {
		l.held[p.Host] = map[int]string{}
	}
	for _, g := range p.GPUs {
		l.held[p.Host][g] = trial
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
