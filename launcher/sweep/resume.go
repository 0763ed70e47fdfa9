package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode"
)

// A sweep keeps its state on the hosts (Record), so that `drover sweep
// status|stop|logs` work from any machine and a sweep whose supervisor
// died is resumed by running the same command again. These are the
// decisions about that record: what it holds, whether one read from a
// host is sane and is this sweep's, whether its supervisor is gone, and
// what becomes of each trial on resume. Reading and writing it is
// sweeprun's.

// RecordVersion is the record's format; another is not resumed.
const RecordVersion = 1

// The sweep's own states, in Record.State.
const (
	SweepRunning = "running"
	SweepDone    = "done"
	SweepStopped = "stopped"
)

// Record is a sweep's state as its hosts keep it.
type Record struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Key is the sweep's fingerprint (Options.Key): the same command
	// resumes a record with the same key, and no other.
	Key   string `json:"key"`
	State string `json:"state"`
	// Detached says a `drover sweep -d` supervises it: its trials are
	// detached runs, which live on without it.
	Detached bool `json:"detached"`
	// Params names the parameters in their order, Metric and Goal the
	// objective: what `drover sweep status` needs to show and rank the
	// trials without the flags the sweep was started with.
	Params         []string `json:"params"`
	Metric         string   `json:"metric"`
	Goal           Goal     `json:"goal"`
	SupervisorHost string   `json:"supervisor_host"`
	SupervisorPid  int      `json:"supervisor_pid"`
	// SupervisorStart is the supervisor's start time (clock ticks after
	// boot, /proc/PID/stat's field 22; 0: unknown): with the pid, it
	// names the process for good, so that another process that got the
	// pid later does not pass for the supervisor.
	SupervisorStart uint64        `json:"supervisor_start,omitempty"`
	Seq             int64         `json:"seq"`
	Updated         time.Time     `json:"updated"`
	Trials          []TrialRecord `json:"trials"`
}

// TrialRecord is one trial in the record: its result, and the series of
// its objective that the median rule needs once it has completed.
type TrialRecord struct {
	Result
	Series Series `json:"series,omitempty"`
}

// MaxRecordSeries bounds the points a record keeps per trial (the first
// ones): the record is read back from hosts and must stay small.
const MaxRecordSeries = 2000

// RecordLimit bounds what is read of a record on a host.
const RecordLimit = 8 << 20

// Over reports whether the sweep has ended (done or stopped).
func (r *Record) Over() bool { return r.State == SweepDone || r.State == SweepStopped }

// Key is the sweep's fingerprint: its trials (ids and values), the
// job's command, the objective and the GPUs per trial. A command run
// again with the same flags and job has the same key.
func (o *Options) Key(command []string) string {
	type trial struct {
		ID     string            `json:"id"`
		Params map[string]string `json:"params"`
	}
	v := struct {
		Trials  []trial  `json:"trials"`
		Command []string `json:"command"`
		Metric  string   `json:"metric"`
		Goal    Goal     `json:"goal"`
		GPUs    int      `json:"gpus"`
	}{Command: command, Metric: o.Metric, Goal: o.Goal, GPUs: o.GPUsPerTrial}
	for _, t := range o.Trials {
		v.Trials = append(v.Trials, trial{t.ID, t.Params})
	}
	b, _ := json.Marshal(v) // maps of strings: no error
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// sweepIDRE is a sweep id as drover makes them (<job>-<time>): a host's
// record never puts anything else in a path or a trial's environment.
var sweepIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidSweepID reports whether id is a sweep id drover could have made.
func ValidSweepID(id string) bool { return sweepIDRE.MatchString(id) }

// CheckRecord refuses a record read from a host that is not sane or,
// with o, not a record of a sweep of opts: the host's data decides
// nothing it could not have decided by being this sweep's record, and
// puts no control character on a terminal. It checks the format, the
// ids, the states, the sizes and, with o, that the trials are opts'
// trials, in order.
func CheckRecord(r *Record, o *Options) error {
	switch {
	case r.Version != RecordVersion:
		return fmt.Errorf("sweep record version %d, not %d", r.Version, RecordVersion)
	case !ValidSweepID(r.ID):
		return fmt.Errorf("sweep record names id %q, which drover never makes", r.ID)
	case r.State != SweepRunning && r.State != SweepDone && r.State != SweepStopped:
		return fmt.Errorf("sweep record %s: unknown state %q", r.ID, r.State)
	case r.Goal != Minimize && r.Goal != Maximize:
		return fmt.Errorf("sweep record %s: unknown goal %q", r.ID, r.Goal)
	case len(r.Trials) > MaxTrials || len(r.Params) > 64:
		return fmt.Errorf("sweep record %s is larger than drover writes", r.ID)
	case o != nil && len(r.Trials) != len(o.Trials):
		return fmt.Errorf("sweep record %s has %d trials, the sweep %d", r.ID, len(r.Trials), len(o.Trials))
	case !printable(r.Metric, r.SupervisorHost):
		return fmt.Errorf("sweep record %s: a control character in its metric or supervisor", r.ID)
	case !keyRE.MatchString(r.Key):
		return fmt.Errorf("sweep record %s: key %q, which drover never makes", r.ID, r.Key)
	case r.SupervisorPid < 0:
		return fmt.Errorf("sweep record %s: supervisor pid %d", r.ID, r.SupervisorPid)
	}
	for _, p := range r.Params {
		if !recNameRE.MatchString(p) {
			return fmt.Errorf("sweep record %s: parameter %q is no name", r.ID, p)
		}
	}
	for i, t := range r.Trials {
		if err := checkTrialRecord(r.ID, t); err != nil {
			return err
		}
		if o != nil && t.ID != o.Trials[i].ID {
			return fmt.Errorf("sweep record %s: trial %d is %q, not %q", r.ID, i, t.ID, o.Trials[i].ID)
		}
	}
	return nil
}

var (
	keyRE     = regexp.MustCompile(`^[0-9a-f]{0,64}$`)
	trialIDRE = regexp.MustCompile(`^t[0-9]{1,5}$`)
	recNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

func checkTrialRecord(id string, t TrialRecord) error {
	if !trialIDRE.MatchString(t.ID) {
		return fmt.Errorf("sweep record %s: trial id %q, which drover never makes", id, t.ID)
	}
	switch t.State {
	case Pending, Running, Completed, Stopped, Interrupted, Failed:
	default:
		return fmt.Errorf("sweep record %s: trial %s has unknown state %q", id, t.ID, t.State)
	}
	if len(t.Series) > MaxRecordSeries || len(t.Params) > 64 || len(t.Hosts) > 1024 {
		return fmt.Errorf("sweep record %s: trial %s is larger than drover writes", id, t.ID)
	}
	if t.Steps < 0 {
		return fmt.Errorf("sweep record %s: trial %s has %d steps", id, t.ID, t.Steps)
	}
	if err := checkPlaces(id, t.Result); err != nil {
		return err
	}
	for k, v := range t.Params {
		if !recNameRE.MatchString(k) || !printable(v) || len(v) > 4096 {
			return fmt.Errorf("sweep record %s: trial %s has parameter %q=%q", id, t.ID, k, v)
		}
	}
	return nil
}

// checkPlaces checks where a trial runs as Result.Place records it: a
// host and its GPUs and, for a trial of several hosts (--hosts-per-trial),
// each of them in Hosts, the first being Host with GPUs (stop, logs and an
// adoption go by Hosts, the table shows Host: they must agree), no host
// twice, no GPU twice on one. A running trial has a host.
func checkPlaces(id string, t Result) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("sweep record %s: trial %s %s", id, t.ID, fmt.Sprintf(format, a...))
	}
	switch {
	case t.State == Running && t.Host == "":
		return bad("runs on no host")
	case len(t.Hosts) == 1:
		return bad("lists one host in hosts, which drover writes only for several")
	case len(t.Hosts) > 1 && (t.Hosts[0].Host != t.Host || !slices.Equal(t.Hosts[0].GPUs, t.GPUs)):
		return bad("runs on %s:%v, but its hosts start with %s:%v", t.Host, t.GPUs, t.Hosts[0].Host, t.Hosts[0].GPUs)
	}
	places := append([]HostGPUs{{Host: t.Host, GPUs: t.GPUs}}, t.Hosts...)
	hosts := map[string]bool{}
	for i, p := range places {
		if len(p.GPUs) > 1024 {
			return bad("is larger than drover writes")
		}
		if p.Host != "" && !hostRE.MatchString(p.Host) || p.Host == "" && (i > 0 || len(p.GPUs) > 0) {
			return bad("names host %q", p.Host)
		}
		if i > 0 { // Hosts[0] repeats Host
			if hosts[p.Host] {
				return bad("names host %s twice", p.Host)
			}
			hosts[p.Host] = true
		}
		gpus := map[int]bool{}
		for _, g := range p.GPUs {
			if g < 0 || gpus[g] {
				return bad("names GPU %d of %s (twice, or below 0)", g, p.Host)
			}
			gpus[g] = true
		}
	}
	return nil
}

// hostRE is an inventory's host name, as the record may name one.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$`)

func printable(ss ...string) bool {
	for _, s := range ss {
		for _, r := range s {
			if unicode.IsControl(r) {
				return false
			}
		}
	}
	return true
}

// Supervision is the record's supervisor as a resume sees it.
type Supervision struct {
	// Here is this machine's name, Alive whether the process pid runs
	// here and, when start is not 0, started at that time (a pid reused
	// by a later process does not count).
	Here  string
	Alive func(pid int, start uint64) bool
	Now   time.Time
}

// StaleAfter is how long a record written by a supervisor on another
// machine may go without a write before that supervisor counts as gone
// (it writes the record at least every HeartbeatEvery).
const (
	HeartbeatEvery = 10 * time.Second
	StaleAfter     = 6 * HeartbeatEvery
)

// SupervisorGone reports whether r's supervisor is gone: on this machine,
// no process of its pid and start time runs (the pid alone, for a record
// without the start); elsewhere, it has not written the record for
// StaleAfter (another machine's pids cannot be asked).
func (s Supervision) SupervisorGone(r *Record) bool {
	if r.SupervisorHost == s.Here && s.Alive != nil {
		return !s.Alive(r.SupervisorPid, r.SupervisorStart)
	}
	return s.Now.Sub(r.Updated) > StaleAfter
}

// RunSeen is what a trial's host says of the trial's newest run, read on
// resume.
type RunSeen struct {
	Found bool // the host has a run of the trial
	// Over says its record is final, Succeeded that it succeeded (a
	// final record that says so, or every process exited 0).
	Over, Succeeded bool
	// Alive says a process of it runs; Exited that every process has
	// exited (with no supervisor to record the end).
	Alive, Exited bool
	// Lost says it was a foreground run whose supervisor is gone: its
	// agents stopped it, and how it ended says nothing of the trial.
	Lost bool
	// RunStarted is when the run started (its id's time): a run older
	// than the trial is another sweep's run of a trial of the same id in
	// the same workdir, and says nothing of this one.
	RunStarted time.Time
}

// Resume is what becomes of a trial when its sweep is resumed.
type Resume int

// What a resume does with a trial.
const (
	Rerun Resume = iota // run it (again): it never ran, or nothing of it is left
	Keep                // it ended: keep its result
	Adopt               // its run lives on: follow it to its end
)

// ResumeTrial decides trial r's fate on resume, given what its host
// says of its run (read only for a trial the record says runs). A
// finished trial is kept; a running one whose run still runs is adopted;
// one whose run ended while nobody watched is kept as it ended; one that
// left no run behind, or a foreground run its agents stopped when the
// supervisor died, runs again, as does one the sweep's end interrupted
// (it has no result).
func ResumeTrial(r Result, seen RunSeen) (Resume, State) {
	switch r.State {
	case Completed, Stopped, Failed:
		return Keep, r.State
	case Pending, Interrupted:
		return Rerun, Pending
	}
	older := r.Started != nil && seen.RunStarted.Before(r.Started.Truncate(time.Second))
	switch {
	case !seen.Found || older:
		return Rerun, Pending
	case seen.Lost && !seen.Succeeded:
		return Rerun, Pending
	case seen.Alive && !seen.Over:
		return Adopt, Running
	case seen.Succeeded:
		return Keep, Completed
	case seen.Over || seen.Exited:
		return Keep, Failed
	}
	return Rerun, Pending
}
