// Package lease keeps two drover controllers from driving the same
// workdir on a host at once. Two runs that did (a job started twice, or
// two jobs sharing a workdir) took each other's live group for a leftover
// and killed it, and pushed over each other's code.
//
// A run holds a lease on every host's workdir for as long as it runs:
// <workdir>/.drover/lease, a symbolic link whose target is the holder's
// identity (run id, job, the controller's host name and pid, when it
// started) and a renewal count. A link is created atomically and fails
// when one is there, so of two runs racing for a workdir exactly one
// wins; it is read back with one request. The holder renews the lease
// every RenewEvery over the connection its Dialer gives it, which must
// live across the run's attempts (the gap between attempts can be long):
// `drover run` gives it the run's own kept connection to the host, and
// the holder closes what the Dialer returned when it gives up on it.
//
// Freshness is judged by watching, never by comparing clocks: a run that
// finds another run's lease reads it again for StaleAfter, and a lease
// whose count moved belongs to a live controller, so the run refuses with
// a *HeldError. A lease that did not move belongs to a controller that is
// gone (SIGKILLed, its machine down, its link cut); the run takes it over
// and only then is that controller's group a leftover to stop. A crashed
// controller therefore blocks the next run for StaleAfter at most, and
// less when it ran on the same machine and its pid is gone. Force takes
// over a live lease; the run that held it learns so at its next renewal
// (Options.Lost), or at once when it checks before a restart (Check), and
// stops without touching the hosts again.
//
// Several --force runs at once must end with exactly one of them, not
// with each holding some hosts: a forced run takes a lease from anyone but
// a forced run that started after it (Outranks), and takes its own back
// from a run that started before it and renamed over it (a renewal that
// raced the takeover); so the newest forced run wins every host and the
// others give up.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// File is where the lease lives, relative to the workdir.
const File = ".drover/lease"

// Owner is who holds a lease: one run of drover.
type Owner struct {
	// ID is random per run; a lease with our ID is ours.
	ID  string `json:"id"`
	Job string `json:"job"`
	// Host and PID are the controller's machine and process.
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	// Start (UnixNano) orders forced runs: of two, the later one wins.
	Start int64 `json:"start,omitempty"`
	// Forced says the run was started with --force.
	Forced bool `json:"forced,omitempty"`
	// Beat counts renewals; a live holder moves it every RenewEvery.
	Beat uint64 `json:"beat"`
}

// Self is the identity of this process's run of job.
func Self(job string, now time.Time) Owner {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return Owner{ID: hex.EncodeToString(b[:]), Job: job, Host: host, PID: os.Getpid(), Since: now.UTC().Truncate(time.Second), Start: now.UnixNano()}
}

// newNonce is a held lease's random tag (see held.tmpLink).
func newNonce() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (o Owner) String() string {
	if o.ID == "" {
		return "an unknown drover"
	}
	return fmt.Sprintf("the drover run of job %q (controller %s, pid %d, run id %s, since %s)", o.Job, o.Host, o.PID, o.ID, o.Since.Format(time.RFC3339))
}

// Outranks reports whether o, another run's lease, keeps a forced run
// self from taking it: o is a forced run that started after self (ties
// broken by run id). Any total order would leave one winner among forced
// runs; this one makes it the newest, the one the user started last.
func (o Owner) Outranks(self Owner) bool {
	return o.Forced && !o.startedBefore(self)
}

// startedBefore orders runs by start, ties broken by run id.
func (o Owner) startedBefore(self Owner) bool {
	return o.Start < self.Start || (o.Start == self.Start && o.ID < self.ID)
}

// Decode reads a lease link's target (an agent checks it, see
// agent.PreflightOptions.LeaseID); one that is not drover's reads as an
// unknown owner, with no ID.
func Decode(s string) Owner { return decode(s) }

func (o Owner) encode() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// decode reads a lease; one that is not drover's reads as an unknown owner.
func decode(s string) Owner {
	var o Owner
	if json.Unmarshal([]byte(s), &o) != nil {
		return Owner{}
	}
	return o
}

// HeldError is a workdir held by another live run, on one or more hosts.
type HeldError struct {
	Hosts []string // inventory names
	Dir   string   // absolute workdir on those hosts
	By    Owner
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("workdir %s on %s is in use by %s, which is alive (it renewed its lease meanwhile): "+
		"not starting a second run over it; stop that run first, or pass --force to take over (that run then stops)",
		e.Dir, strings.Join(e.Hosts, ", "), e.By)
}

// joinHeld folds the HeldErrors of one owner and workdir into one, so a
// run refused on every host says so once.
func joinHeld(errs []error) error {
	var out []error
	byOwner := map[string]*HeldError{}
	for _, err := range errs {
		var he *HeldError
		if !errors.As(err, &he) {
			out = append(out, err)
			continue
		}
		k := he.By.ID + "\x00" + he.Dir
		if first, ok := byOwner[k]; ok {
			first.Hosts = append(first.Hosts, he.Hosts...)
			continue
		}
		byOwner[k] = he
		out = append(out, he)
	}
	return errors.Join(out...)
}

// LostError is a lease another run took over (with --force) while we
// held it, or that a newer forced run holds when we want it: this run
// stops without restarting.
type LostError struct {
	Host string
	Dir  string
	By   Owner
}

func (e *LostError) Error() string {
	how := ""
	if e.By.Forced {
		how = " (--force)"
	}
	return fmt.Sprintf("%s: %s took over workdir %s%s; stopping this run without restarting", e.Host, e.By, e.Dir, how)
}

// NotLeaseError is a lease path holding something drover did not put
// there (a regular file, a directory): no run can take it without --force.
type NotLeaseError struct {
	Host string
	File string
	What string // "a regular file", "a directory", ...
}

func (e *NotLeaseError) Error() string {
	return fmt.Sprintf("%s: the workdir lease %s is %s, not drover's lease (a symbolic link): "+
		"remove it if no drover run uses this workdir, or pass --force to replace it", e.Host, e.File, e.What)
}

// Options tunes a Holder; zero values take the defaults.
type Options struct {
	// RenewEvery is how often a held lease is renewed (default 2s).
	RenewEvery time.Duration
	// StaleAfter is how long another run's lease must stay unchanged to
	// count as abandoned (default 12s).
	StaleAfter time.Duration
	// Force takes over leases of live runs.
	Force bool
	// Logf receives what the holder does about other runs' leases.
	Logf func(format string, args ...any)
	// Lost is called once, from a renewal, when another run took a lease
	// of ours over.
	Lost func(error)
}

func (o Options) withDefaults() Options {
	if o.RenewEvery <= 0 {
		o.RenewEvery = 2 * time.Second
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 12 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Lost == nil {
		o.Lost = func(error) {}
	}
	return o
}

// Dialer opens the holder's own connection to a host.
type Dialer func(ctx context.Context, h config.Host) (cluster.Transport, error)

// Target is a workdir to hold on a host; Workdir relative to the home.
type Target struct {
	Host    config.Host
	Workdir string
}

// Holder holds this run's leases and renews them until Release.
type Holder struct {
	self Owner
	opts Options

	mu       sync.Mutex
	held     map[string]*held // by host name + workdir
	gone     []*held          // dropped by Keep, maybe still giving back
	lostOnce sync.Once
	// ctx ends at Release: renewals stop, blocked dials give up.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Holder for the run self.
func New(self Owner, opts Options) *Holder {
	self.Forced = opts.Force
	ctx, cancel := context.WithCancel(context.Background())
	return &Holder{self: self, opts: opts.withDefaults(), held: map[string]*held{}, ctx: ctx, cancel: cancel}
}

// ID is this run's id, as its leases hold it.
func (h *Holder) ID() string { return h.self.ID }

// held is one lease of ours and the connection that renews it. Only its
// renewal goroutine uses it once acquired, except that Release may close
// the connection under mu to cut short an operation stuck on a dead link.
type held struct {
	name   string // the host's inventory name, for messages
	target Target // guarded by mu once held
	dial   Dialer
	mu     sync.Mutex
	t      cluster.Transport // nil while the host is unreachable
	fs     cluster.FS
	file   string // absolute lease path
	dir    string // absolute workdir
	beat   uint64
	// nonce tells this host's lease apart from another's of the same
	// run in the temporary links of a beat (see tmpLink).
	nonce uint32
	// lost is set once another run took the lease: it is not ours to renew or give back.
	lost *LostError
	// op serialises the renewals and Check on this lease.
	op sync.Mutex
	// dropped is closed when the run no longer uses the host (Keep):
	// the lease is given back then rather than at Release.
	dropped chan struct{}
}

func key(t Target) string { return t.Host.Name + "\x00" + t.Workdir }

// Acquire takes the lease of every target not held yet, all hosts at once,
// and keeps them renewed. It fails with a *HeldError when a live run holds
// one (unless Force); leases it took meanwhile stay held until Release.
func (h *Holder) Acquire(ctx context.Context, dial Dialer, targets []Target) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		h.mu.Lock()
		l, ok := h.held[key(tg)]
		h.mu.Unlock()
		if ok {
			l.update(tg.Host, dial)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.acquire(ctx, dial, tg)
		}()
	}
	wg.Wait()
	return joinHeld(errs)
}

func (h *Holder) acquire(ctx context.Context, dial Dialer, tg Target) error {
	l := &held{name: tg.Host.Name, target: tg, dial: dial, dropped: make(chan struct{}), nonce: newNonce()}
	if err := l.connect(ctx); err != nil {
		return fmt.Errorf("take the workdir lease on %s: %w", tg.Host.Name, err)
	}
	// The usual case, a workdir whose state directory is there (a run
	// before this one, or the agent's install made it), costs the one
	// request that creates the lease; only a missing directory is made
	// first, and only a lease already there goes through take.
	err := l.fs.Symlink(h.mine(l), l.file)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		err = l.fs.MkdirAll(path.Dir(l.file), 0o700) // .drover: the login user's only
		if err != nil {
			l.close()
			return fmt.Errorf("take the workdir lease on %s: %w", tg.Host.Name, err)
		}
		err = errors.New("not created yet")
	}
	if err != nil {
		if err := h.take(ctx, l); err != nil {
			l.close()
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		l.close()
		return errors.New("lease: acquire after release")
	}
	h.held[key(tg)] = l
	h.wg.Add(1)
	go h.renewLoop(l)
	return nil
}

// Keep gives back, now, the leases of every workdir not in targets: a
// host that left the inventory, or was replaced by a spare, is no longer
// this run's to hold, and another run may want it.
func (h *Holder) Keep(targets []Target) {
	want := map[string]bool{}
	for _, tg := range targets {
		want[key(tg)] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, l := range h.held {
		if !want[k] {
			delete(h.held, k)
			h.gone = append(h.gone, l)
			close(l.dropped)
		}
	}
}

// update takes a held host's address as this attempt resolved it (the
// inventory may have moved it); a changed one is dialled afresh at the
// next renewal.
func (l *held) update(h config.Host, dial Dialer) {
	l.mu.Lock()
	moved := l.target.Host.Address != h.Address || l.target.Host.Port != h.Port || l.target.Host.Transport != h.Transport
	l.target.Host, l.dial = h, dial
	l.mu.Unlock()
	if moved {
		l.close()
	}
}

// connect opens l's own connection and works out its paths.
func (l *held) connect(ctx context.Context) error {
	l.mu.Lock()
	host, dial := l.target.Host, l.dial
	l.mu.Unlock()
	t, err := dial(ctx, host)
	if err != nil {
		return err
	}
	fsys, err := t.FS(ctx)
	if err != nil {
		t.Close()
		return err
	}
	dir := l.target.Workdir
	if !path.IsAbs(dir) {
		home, err := fsys.Home()
		if err != nil {
			t.Close()
			return err
		}
		dir = path.Join(home, dir)
	}
	l.mu.Lock()
	l.t, l.fs = t, fsys
	l.mu.Unlock()
	l.dir = dir
	l.file = path.Join(l.dir, File)
	return nil
}

func (l *held) close() {
	l.mu.Lock()
	t := l.t
	l.t, l.fs = nil, nil
	l.mu.Unlock()
	if t != nil {
		t.Close()
	}
}

// tmpLink is the new link of l's next write, beside the lease and
// renamed over it. Hosts that share a workdir (a shared file system, as
// under Slurm) hold one lease file through as many helds of one run, each
// renewing it at the same cadence: with the run's id and the beat alone
// their links were the same name, so that one's link creation failed on
// the other's, which removed it, failing the other's rename, beat after
// beat, and the lease stood still while its run lived (another run then
// took the workdir; TestRefusalFoldedAcrossHosts under load in CI).
func (l *held) tmpLink(id string) string {
	return fmt.Sprintf("%s.%s.%08x.%d", l.file, id, l.nonce, l.beat)
}

// files is l's file access, or nil while it has no connection.
func (l *held) files() cluster.FS {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fs
}

// take makes l's lease ours: created when there is none, kept when it is
// ours already, taken over when its holder is gone (or with Force, unless
// a newer forced run holds it: a *LostError).
func (h *Holder) take(ctx context.Context, l *held) error {
	name := l.name
	for try := 0; try < 5; try++ {
		err := l.fs.Symlink(h.mine(l), l.file)
		if err == nil {
			return nil
		}
		cur, rerr := l.fs.Readlink(l.file)
		if errors.Is(rerr, fs.ErrNotExist) {
			continue // released meanwhile: create again
		}
		if rerr != nil {
			if err := h.notLease(l, err, rerr); err != nil {
				return err
			}
			continue // --force removed what was there
		}
		other := decode(cur)
		if other.ID == h.self.ID {
			l.beat = other.Beat
			return nil
		}
		if !h.opts.Force {
			live, released, err := h.watch(ctx, l, cur, other)
			if err != nil {
				return err
			}
			if released {
				continue
			}
			if live {
				return &HeldError{Hosts: []string{name}, Dir: l.dir, By: other}
			}
		} else if other.Outranks(h.self) {
			return &LostError{Host: name, Dir: l.dir, By: other}
		} else {
			h.opts.Logf("%s: taking over workdir %s from %s (--force)", name, l.dir, other)
		}
		ok, err := h.replace(l.fs, l, cur)
		if err != nil {
			return fmt.Errorf("take over the workdir lease %s on %s: %w", l.file, name, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("take the workdir lease %s on %s: it keeps changing hands", l.file, name)
}

// notLease handles a lease path that is there (creating the link failed
// with cerr) but cannot be read as a link (rerr): something else (a
// regular file, a directory) that drover did not put there. Without Force
// that is a *NotLeaseError; with it, what is there is removed (a
// directory only when empty) and nil returned.
func (h *Holder) notLease(l *held, cerr, rerr error) error {
	what := describe(l.fs, l.file)
	if what == "" {
		return fmt.Errorf("take the workdir lease %s on %s: %w (reading it: %v)", l.file, l.name, cerr, rerr)
	}
	if !h.opts.Force {
		return &NotLeaseError{Host: l.name, File: l.file, What: what}
	}
	h.opts.Logf("%s: the workdir lease %s was %s, not drover's lease; replacing it (--force)", l.name, l.file, what)
	if err := l.fs.Remove(l.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replace the workdir lease %s on %s, which is %s: %w (remove it by hand)", l.file, l.name, what, err)
	}
	return nil
}

// describe names what is at file when it is not a symbolic link ("" when
// it is one, or cannot be told).
func describe(fsys cluster.FS, file string) string {
	fi, err := fsys.Lstat(file)
	if err != nil {
		return ""
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		return fmt.Sprintf("a regular file (%d bytes)", fi.Size())
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return ""
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a symbolic link"
	}
}

// watch reads another run's lease until it moves (its holder is alive),
// disappears (released) or has stood still for StaleAfter (gone).
func (h *Holder) watch(ctx context.Context, l *held, cur string, other Owner) (live, released bool, err error) {
	wait := h.opts.StaleAfter
	if other.ID != "" && h.localAndDead(other) {
		// Its process is gone from this machine: confirm with a couple of
		// missed renewals instead of the full wait.
		wait = min(wait, 2*h.opts.RenewEvery+h.opts.RenewEvery/2)
	}
	h.opts.Logf("%s: workdir %s is held by %s; watching its lease for %s to tell whether it is alive", l.name, l.dir, other, wait)
	poll := time.NewTicker(min(h.opts.RenewEvery/4+time.Millisecond, 500*time.Millisecond))
	defer poll.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-deadline.C:
			h.opts.Logf("%s: the lease of %s on workdir %s was not renewed for %s: that controller is gone; taking over its workdir and stopping what it left running", l.name, other, l.dir, wait)
			return false, false, nil
		case <-poll.C:
			now, err := l.fs.Readlink(l.file)
			if errors.Is(err, fs.ErrNotExist) {
				return false, true, nil
			}
			if err != nil {
				return false, false, fmt.Errorf("watch the workdir lease %s on %s: %w", l.file, l.name, err)
			}
			if now != cur {
				return true, false, nil
			}
		}
	}
}

// localAndDead: other ran on this machine and its pid is gone.
func (h *Holder) localAndDead(other Owner) bool {
	return other.Host == h.self.Host && other.PID > 0 && errors.Is(syscall.Kill(other.PID, 0), syscall.ESRCH)
}

// mine is the lease target for l's next beat.
func (h *Holder) mine(l *held) string {
	o := h.self
	o.Beat = l.beat
	return o.encode()
}

// replace swaps the lease for ours if it still reads old: a new link
// beside it, renamed over it. ok is false when it changed meanwhile.
func (h *Holder) replace(fsys cluster.FS, l *held, old string) (ok bool, err error) {
	tmp := l.tmpLink(h.self.ID)
	_ = fsys.Remove(tmp)
	if err := fsys.Symlink(h.mine(l), tmp); err != nil {
		return false, err
	}
	cur, err := fsys.Readlink(l.file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = fsys.Remove(tmp)
		return false, err
	}
	if err == nil && cur != old {
		_ = fsys.Remove(tmp)
		return false, nil
	}
	if err := fsys.Rename(tmp, l.file); err != nil {
		_ = fsys.Remove(tmp)
		return false, err
	}
	return true, nil
}
