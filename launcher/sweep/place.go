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

// Ledger is the sweep's own account of the GPUs its trials hold: what the
// fleet has, and which trial holds each GPU. It keeps two of the sweep's
// trials off one GPU whatever the hosts report (a trial's process may
// not have touched its GPU yet when the next is placed).
type Ledger struct {
	fleet []HostGPUs
	held  map[string]map[int]string // host → GPU → trial id
}

// NewLedger starts an account of fleet with nothing held.
func NewLedger(fleet []HostGPUs) *Ledger {
	return &Ledger{fleet: fleet, held: map[string]map[int]string{}}
}

// Free returns each host's GPUs no trial holds, in host order.
func (l *Ledger) Free() []HostGPUs {
	var out []HostGPUs
	for _, h := range l.fleet {
		f := HostGPUs{Host: h.Host}
		for _, g := range h.GPUs {
			if _, taken := l.held[h.Host][g]; !taken {
				f.GPUs = append(f.GPUs, g)
			}
		}
		out = append(out, f)
	}
	return out
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
