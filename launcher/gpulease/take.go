package gpulease

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Lease is the GPUs one take holds, each file locked by this process.
type Lease struct {
	GPUs  []int
	files []*held
}

// Release gives every GPU of l back.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	for _, h := range l.files {
		h.release()
	}
	l.files = nil
}

// takeTries bounds the retries of a take that lost a race with another
// user's take of the same GPU (both back off; see Take).
const takeTries = 5

// Take leases GPUs in dir for me: Choose over the live leases, then each
// chosen GPU's file created whole and locked. A take that finds another
// live lease on a GPU it just created (two users at once: each user has
// a file name of their own) gives it back and tries again; a name already
// taken by the same user is a live lease (a dead one was reclaimed by the
// listing). Too few free GPUs is a *BusyError.
func Take(dir string, cands []Candidate, n, min int, me Holder) (*Lease, error) {
	var lastBusy error
	for try := range takeTries {
		if try > 0 {
			time.Sleep(time.Duration(10+randN(40)) * time.Millisecond)
		}
		live, err := List(dir)
		if err != nil {
			return nil, err
		}
		ours := leasedBy(live, me.RunID)
		chosen, err := Choose(cands, live, n, min)
		if err != nil {
			return nil, err
		}
		l, err := takeAll(dir, chosen, me, ours)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, errRace) {
			return nil, err
		}
		lastBusy = err
	}
	live, err := List(dir)
	if err != nil {
		return nil, err
	}
	if _, err := Choose(cands, live, n, min); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("lease GPUs in %s: lost %d races with other users' takes: %w", dir, takeTries, lastBusy)
}

var errRace = errors.New("another run leased the GPU at the same moment")

// leasedBy takes out of live the leases of run, and returns their keys:
// a run that adopts its own live group finds its leases held by that
// group's agents, and takes them back (takeAll).
func leasedBy(live map[string]Holder, run string) map[string]bool {
	ours := map[string]bool{}
	for k, h := range live {
		if run != "" && h.RunID == run && h.UID == os.Getuid() {
			ours[k] = true
			delete(live, k)
		}
	}
	return ours
}

// takeAll creates the lease file of every chosen GPU, or none; a lease
// of this run (ours) is joined instead.
func takeAll(dir string, chosen []Candidate, me Holder, ours map[string]bool) (*Lease, error) {
	l := &Lease{}
	for _, c := range chosen {
		h := me
		h.GPU, h.Key = c.Index, c.Key
		var f *held
		var err error
		if ours[c.Key] {
			path := filepath.Join(dir, leaseName(c.Key, os.Getuid()))
			var jf *os.File
			if jf, err = Join(path); err == nil {
				f = &held{path: path, f: jf}
			} else {
				err = errRace
			}
		} else {
			f, err = create(dir, leaseName(c.Key, os.Getuid()), h)
		}
		if errors.Is(err, fs.ErrExist) {
			err = errRace
		}
		if err == nil && othersLive(dir, c.Key) {
			f.release()
			err = errRace
		}
		if err != nil {
			l.Release()
			return nil, err
		}
		l.files = append(l.files, f)
		l.GPUs = append(l.GPUs, c.Index)
	}
	return l, nil
}

// Files are the lease files l holds, for the group's agents to Join.
func (l *Lease) Files() []string {
	var out []string
	for _, h := range l.files {
		out = append(out, h.path)
	}
	return out
}

// othersLive says whether a live lease of another user holds key.
func othersLive(dir, key string) bool {
	es, err := list(dir, leaseSuffix)
	if err != nil {
		return true
	}
	mine := leaseName(key, os.Getuid())
	for _, e := range es {
		if e.alive && e.name != mine && len(e.name) > len(key) && e.name[:len(key)+1] == key+"." {
			return true
		}
	}
	return false
}

func randN(n int) int {
	var b [1]byte
	randRead(b[:])
	return int(b[0]) % n
}

// waitName is the queue file of w.
func waitName(w Waiter) string {
	return "q." + strconv.FormatInt(w.Since.UnixNano(), 10) + "." + w.RunID + "." + strconv.Itoa(os.Getuid()) + waitSuffix
}
