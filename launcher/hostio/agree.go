package hostio

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
)

// A host's report of its workdir's run is evidence, not authority: a host
// whose login account is compromised can rewrite its copy of the run
// record (another run id, a later `updated`). Adoption (`drover run`),
// `drover status`, `stop` and `logs` all follow the run the hosts agree
// on (Agree), and name the hosts that say otherwise instead of following
// them.

// Agreement is what the hosts of a workdir say its run is.
type Agreement struct {
	// Run is the agreed run's record (nil: no host has a run, or the
	// hosts do not agree; see Tied). Of the versions the agreeing hosts
	// hold, it is the one most of them hold (the newest of those tied).
	Run *agent.RunRecord
	// Hosts report Run.
	Hosts []string
	// Dissent are the hosts whose report names another run, or a run id
	// that is not drover's: not followed.
	Dissent []Dissent
	// Tied are the runs that as many hosts (and live leases) back as
	// the most backed one, when no run is agreed on.
	Tied []string
	// Unreachable are the hosts that could not be read, as their errors.
	Unreachable []error
}

// Dissent is a host whose report is not the agreed run.
type Dissent struct {
	Host  string
	RunID string // as reported: quote it (cluster.Escape) before showing it
	// Malformed: the id is not drover's (agent.CheckRunID).
	Malformed bool
}

func (d Dissent) String() string {
	if d.Malformed {
		return fmt.Sprintf("%s reports a run id that is not drover's (%s)", d.Host, cluster.Escape(d.RunID))
	}
	return fmt.Sprintf("%s reports run %s", d.Host, d.RunID)
}

// DisagreeError is a workdir whose hosts back two or more runs equally:
// drover follows none of them.
type DisagreeError struct {
	Runs    []string
	Dissent []Dissent
}

func (e *DisagreeError) Error() string {
	var says []string
	for _, d := range e.Dissent {
		says = append(says, d.String())
	}
	return fmt.Sprintf("the hosts do not agree on the workdir's run (%s): drover follows none of runs %s; "+
		"look at the hosts that say otherwise (their .drover/runs/current and run.json may have been rewritten)",
		strings.Join(says, "; "), strings.Join(e.Runs, ", "))
}

// Err is the agreement's error: a *DisagreeError when runs are tied.
func (a Agreement) Err() error {
	if len(a.Tied) == 0 {
		return nil
	}
	return &DisagreeError{Runs: a.Tied, Dissent: a.Dissent}
}

// candidate is one run id and the hosts that report it.
type candidate struct {
	id     string
	hosts  []string
	recs   []*agent.RunRecord
	leases int // hosts whose live lease names the run's supervisor
}

// Agree is the run the views' hosts agree on: the run id most hosts
// report, then, between runs as many hosts report, the one most live
// leases back (a lease renewed lately by the supervisor its record
// names); a tie leaves no run agreed (Tied). A host with no run has no
// say; an id that is not drover's counts for nothing and is a dissent.
func Agree(views []*View) Agreement {
	var ag Agreement
	byID := map[string]*candidate{}
	var ids []string
	for _, v := range views {
		switch {
		case v.Err != nil:
			ag.Unreachable = append(ag.Unreachable, v.Err)
			continue
		case v.Report == nil || v.Report.Run == nil:
			continue
		}
		rec := v.Report.Run
		if agent.CheckRunID(rec.RunID) != nil {
			ag.Dissent = append(ag.Dissent, Dissent{Host: v.Host.Name, RunID: rec.RunID, Malformed: true})
			continue
		}
		c := byID[rec.RunID]
		if c == nil {
			c = &candidate{id: rec.RunID}
			byID[rec.RunID], ids = c, append(ids, rec.RunID)
		}
		c.hosts, c.recs = append(c.hosts, v.Host.Name), append(c.recs, rec)
		if LeaseNames(v.Report, rec) {
			c.leases++
		}
	}
	sort.Strings(ids)
	var best *candidate
	for _, id := range ids {
		c := byID[id]
		if best == nil || len(c.hosts) > len(best.hosts) || len(c.hosts) == len(best.hosts) && c.leases > best.leases {
			best = c
		}
	}
	if best == nil {
		return ag
	}
	for _, id := range ids {
		if c := byID[id]; c != best && len(c.hosts) == len(best.hosts) && c.leases == best.leases {
			ag.Tied = append(ag.Tied, id)
		}
	}
	if len(ag.Tied) > 0 {
		ag.Tied = append([]string{best.id}, ag.Tied...)
		sort.Strings(ag.Tied)
		best = nil
	}
	for _, id := range ids {
		if c := byID[id]; c != best {
			for _, h := range c.hosts {
				ag.Dissent = append(ag.Dissent, Dissent{Host: h, RunID: id})
			}
		}
	}
	if best != nil {
		ag.Run, ag.Hosts = commonRecord(best.recs), best.hosts
	}
	return ag
}

// commonRecord is the version of a run's record most of recs are, the
// newest of those tied: the hosts' copies differ only while the
// supervisor writes them one after another.
func commonRecord(recs []*agent.RunRecord) *agent.RunRecord {
	var best *agent.RunRecord
	bestN := 0
	for _, r := range recs {
		n := 0
		for _, o := range recs {
			if reflect.DeepEqual(r, o) {
				n++
			}
		}
		if n > bestN || n == bestN && r.Updated.After(best.Updated) {
			best, bestN = r, n
		}
	}
	return best
}

// LeaseStale is how old a workdir's lease may be and its holder still
// count as alive: lease.Options' default StaleAfter.
const LeaseStale = 12 * time.Second

// LeaseNames reports whether rep's workdir lease names rec's supervisor
// and was renewed lately (by the host's own clock).
func LeaseNames(rep *agent.HostReport, rec *agent.RunRecord) bool {
	var owner struct { // lease.Owner's fields that name a supervisor
		Host string `json:"host"`
		PID  int    `json:"pid"`
	}
	if rep.Lease == "" || json.Unmarshal([]byte(rep.Lease), &owner) != nil {
		return false
	}
	return owner.PID == rec.SupervisorPid && owner.Host == rec.SupervisorHost && rep.LeaseAgeS < LeaseStale.Seconds()
}
