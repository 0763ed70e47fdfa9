package sweeprun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/sweep"
)

// A sweep's state lives on its hosts: every host of the job keeps the
// sweep's record (sweep.Record) in its workdir, at StateDir/record.json,
// written whole through a temporary name, so that `drover sweep
// status|stop|logs` read it from any machine and a sweep whose
// supervisor died is resumed by running the same command again. A stop
// request is StateDir/stop-<id>, which the supervisor looks for at each
// write.

// StateDir is the sweep's directory in the job's workdir on each host.
const StateDir = ".drover/sweep"

const (
	recordFile = "record.json"
	// persistEvery is how often the runner hands its trials to Persist.
	persistEvery = 2 * time.Second
)

// Store is the job's hosts as the sweep's record reaches them: one
// connection with file access per host that answered.
type Store struct {
	hosts []storeHost
	// Unreachable are the hosts that did not answer.
	Unreachable []error
}

type storeHost struct {
	name string
	t    cluster.Transport
	fs   cluster.FS
	wd   string
}

// OpenStore connects to every host, each within hostio.DefaultHostWait
// (wait when > 0); the hosts that do not answer are left out and named in
// Unreachable. It fails when none answers.
func OpenStore(ctx context.Context, hosts []config.Host, dial cluster.DialOptions, wait time.Duration) (*Store, error) {
	if wait <= 0 {
		wait = hostio.DefaultHostWait
	}
	dial.Inventory = config.Endpoints(hosts)
	s := &Store{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh, err := openHost(ctx, h, dial, wait)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.Unreachable = append(s.Unreachable, fmt.Errorf("sweep record on %s: %w", hostio.Label(h), err))
				return
			}
			s.hosts = append(s.hosts, sh)
		}()
	}
	wg.Wait()
	if len(s.hosts) == 0 {
		return nil, fmt.Errorf("no host of the job answered: %w", errors.Join(s.Unreachable...))
	}
	return s, nil
}

func openHost(ctx context.Context, h config.Host, dial cluster.DialOptions, wait time.Duration) (storeHost, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t, err := cluster.Dial(ctx, h.Endpoint(), dial)
	if err != nil {
		return storeHost{}, err
	}
	fs, err := t.FS(ctx)
	if err != nil {
		t.Close()
		return storeHost{}, err
	}
	home, err := fs.Home()
	if err != nil {
		t.Close()
		return storeHost{}, err
	}
	return storeHost{name: h.Name, t: t, fs: fs, wd: hostio.Abs(home, h.Workdir)}, nil
}

// Close closes the connections.
func (s *Store) Close() {
	for _, h := range s.hosts {
		h.t.Close()
	}
}

// Load reads the record from every host and returns the newest sane one
// (the highest Seq; sweep.CheckRecord with o, which may be nil), or nil
// when no host has one. A host's record that is not sane is skipped and
// said in the returned notes.
func (s *Store) Load(o *sweep.Options) (rec *sweep.Record, notes []string) {
	for _, h := range s.hosts {
		b, err := hostio.ReadSmall(h.fs, path.Join(h.wd, StateDir, recordFile), sweep.RecordLimit)
		if err != nil {
			continue // none there
		}
		var r sweep.Record
		if err := json.Unmarshal(b, &r); err != nil {
			notes = append(notes, fmt.Sprintf("%s: sweep record %s is not JSON: %v (skipped)", h.name, path.Join(h.wd, StateDir, recordFile), err))
			continue
		}
		if err := sweep.CheckRecord(&r, o); err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v (skipped)", h.name, err))
			continue
		}
		if rec == nil || r.Seq > rec.Seq {
			rec = &r
		}
	}
	return rec, notes
}

// Save writes rec to every host; it fails only when no host took it.
func (s *Store) Save(rec *sweep.Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode sweep record %s: %w", rec.ID, err)
	}
	// The newline is added once, here: appended in each host's goroutine
	// it would be written into data's spare capacity by all of them at
	// once (a data race the -race fleet tests caught).
	data = append(data, '\n')
	errs := s.each(func(h storeHost) error {
		return hostio.WriteAtomic(h.fs, path.Join(h.wd, StateDir), recordFile, data)
	})
	if len(errs) == len(s.hosts) {
		return fmt.Errorf("write sweep record %s on no host: %w", rec.ID, errors.Join(errs...))
	}
	return nil
}

// AskStop writes sweep id's stop request on every host, saying who asks.
func (s *Store) AskStop(id, by string) error {
	errs := s.each(func(h storeHost) error {
		return hostio.WriteAtomic(h.fs, path.Join(h.wd, StateDir), "stop-"+id, []byte(by+"\n"))
	})
	if len(errs) == len(s.hosts) {
		return fmt.Errorf("ask sweep %s to stop on no host: %w", id, errors.Join(errs...))
	}
	return nil
}

// StopAsked reports whether any host has sweep id's stop request.
func (s *Store) StopAsked(id string) bool {
	for _, h := range s.hosts {
		if _, err := h.fs.Stat(path.Join(h.wd, StateDir, "stop-"+id)); err == nil {
			return true
		}
	}
	return false
}

func (s *Store) each(fn func(storeHost) error) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, h := range s.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(h); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", h.name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Resumed is one trial of a resumed sweep: what its record kept, and
// what the resume makes of it (sweep.ResumeTrial).
type Resumed struct {
	Record sweep.TrialRecord
	Action sweep.Resume
	State  sweep.State
}

// restore starts each trial of a resumed sweep where its record left
// it: a kept one ended as it did, an adopted one runs on its recorded
// host and GPUs, with the series its record holds, the repeats of which
// in its run's output are dropped (sweep.Replay).
func (st *state) restore() {
	if len(st.Resumed) != len(st.trials) {
		return
	}
	for i, r := range st.Resumed {
		if r.Action == sweep.Rerun {
			continue
		}
		t := st.trials[i]
		t.res = r.Record.Result
		t.res.Params = st.Options.Trials[i].Params
		t.res.State = r.State
		t.series = append(sweep.Series(nil), r.Record.Series...)
		t.resumed = r.Action
		if r.Action == sweep.Adopt && len(t.series) > 0 {
			t.replay = &sweep.Replay{Last: t.series.Steps()}
		}
	}
}

// skipResumed is the first trial from i on that the scheduler places:
// kept and adopted trials are not placed.
func (st *state) skipResumed(i int) int {
	for i < len(st.trials) && st.trials[i].resumed != sweep.Rerun {
		i++
	}
	return i
}

// adopted are the placements of the adopted trials: the sweep's own
// GPUs, which a look at the hosts shows leased or busy by their runs.
func (st *state) adopted() []sweep.Placement {
	var ps []sweep.Placement
	for _, t := range st.trials {
		if t.resumed == sweep.Adopt {
			ps = append(ps, t.res.Placement())
		}
	}
	return ps
}

// startAdopted starts following each adopted trial on its recorded
// placement, held in the ledger as the others', and returns how many.
func (st *state) startAdopted(ctx context.Context, ledger *sweep.Ledger, done chan<- ended) (int, error) {
	n := 0
	for i, t := range st.trials {
		if t.resumed != sweep.Adopt {
			continue
		}
		p := t.res.Placement()
		if err := ledger.Take(t.res.ID, p); err != nil {
			return n, err
		}
		go st.runTrial(ctx, i, p, done)
		n++
	}
	return n, nil
}

// persist hands the trials to Persist every persistEvery until the
// returned stop, which hands them a last time.
func (st *state) persist() (stop func()) {
	if st.Persist == nil {
		return func() {}
	}
	return every(persistEvery, func() { st.Persist(st.records()) })
}

// records copies every trial's result and series (the first
// sweep.MaxRecordSeries points) for the record.
func (st *state) records() []sweep.TrialRecord {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]sweep.TrialRecord, len(st.trials))
	for i, t := range st.trials {
		s := t.series
		if len(s) > sweep.MaxRecordSeries {
			s = s[:sweep.MaxRecordSeries]
		}
		out[i] = sweep.TrialRecord{Result: t.res, Series: append(sweep.Series(nil), s...)}
	}
	return out
}
