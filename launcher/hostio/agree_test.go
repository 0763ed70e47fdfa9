package hostio

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
)

// A host's run record is evidence, not authority: the run followed is the
// one most hosts report (then the one most live leases back), never the
// one a host updated last; an id that is not drover's counts for nothing.
func TestAgree(t *testing.T) {
	const real, forged, old = "20260312-120000-aaaaaa", "20260312-130000-bbbbbb", "20260301-120000-cccccc"
	t0 := time.Date(2026, 3, 12, 12, 0, 0, 0, time.UTC)
	rec := func(id string, updated time.Duration) *agent.RunRecord {
		return &agent.RunRecord{RunID: id, State: agent.RunRunning, Attempt: 1, SupervisorHost: "ctl", SupervisorPid: 42, Updated: t0.Add(updated)}
	}
	live := `{"host":"ctl","pid":42}`
	type host struct {
		run   *agent.RunRecord
		lease string
		err   bool
	}
	for _, tc := range []struct {
		name    string
		hosts   []host
		want    string // agreed run id ("" none)
		agree   []string
		dissent []string
		tied    []string
		unreach int
	}{
		{name: "no run anywhere", hosts: []host{{}, {}}},
		{name: "all agree", hosts: []host{{run: rec(real, 0)}, {run: rec(real, 0)}, {run: rec(real, 0)}}, want: real, agree: []string{"h0", "h1", "h2"}},
		{name: "a later forged id on one host is outvoted",
			hosts: []host{{run: rec(real, 0)}, {run: rec(real, 0)}, {run: rec(forged, time.Hour)}},
			want:  real, agree: []string{"h0", "h1"}, dissent: []string{"h2 reports run " + forged}},
		{name: "a path as run id counts for nothing",
			hosts: []host{{run: rec(real, 0)}, {run: rec("../../../../evil", time.Hour)}},
			want:  real, agree: []string{"h0"}, dissent: []string{`h1 reports a run id that is not drover's (../../../../evil)`}},
		{name: "a malformed id alone is no run",
			hosts:   []host{{}, {run: rec("x/../../y", time.Hour)}},
			dissent: []string{`h1 reports a run id that is not drover's (x/../../y)`}},
		{name: "one against one: the live lease decides",
			hosts: []host{{run: rec(real, 0), lease: live}, {run: rec(forged, time.Hour)}},
			want:  real, agree: []string{"h0"}, dissent: []string{"h1 reports run " + forged}},
		{name: "one against one, no lease: none followed",
			hosts:   []host{{run: rec(real, 0)}, {run: rec(forged, time.Hour)}},
			dissent: []string{"h0 reports run " + real, "h1 reports run " + forged}, tied: []string{real, forged}},
		{name: "spares without a run have no say",
			hosts: []host{{run: rec(real, 0)}, {}, {}}, want: real, agree: []string{"h0"}},
		{name: "spares with an older run are outvoted",
			hosts: []host{{run: rec(real, 0)}, {run: rec(real, 0)}, {run: rec(old, -time.Hour)}},
			want:  real, agree: []string{"h0", "h1"}, dissent: []string{"h2 reports run " + old}},
		{name: "unreachable hosts are named, the rest agree",
			hosts: []host{{run: rec(real, 0)}, {err: true}}, want: real, agree: []string{"h0"}, unreach: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var views []*View
			for i, h := range tc.hosts {
				v := &View{Conn: Conn{Host: config.Host{Name: fmt.Sprintf("h%d", i)}}, Report: &agent.HostReport{Run: h.run, Lease: h.lease}}
				if h.err {
					v.Report, v.Err = nil, errors.New("cut off")
				}
				views = append(views, v)
			}
			ag := Agree(views)
			if tc.want == "" {
				assert.Nil(t, ag.Run)
			} else if assert.NotNil(t, ag.Run) {
				assert.Equal(t, tc.want, ag.Run.RunID)
			}
			assert.Equal(t, tc.agree, ag.Hosts)
			var dissent []string
			for _, d := range ag.Dissent {
				dissent = append(dissent, d.String())
			}
			assert.Equal(t, tc.dissent, dissent)
			assert.Equal(t, tc.tied, ag.Tied)
			assert.Len(t, ag.Unreachable, tc.unreach)
			var dis *DisagreeError
			assert.Equal(t, len(tc.tied) > 0, errors.As(ag.Err(), &dis))
		})
	}
}

// Of the versions of the agreed run the hosts hold (the supervisor writes
// them one after another), the one most hold is taken, not the newest one
// host says.
func TestAgreeCommonRecord(t *testing.T) {
	const id = "20260312-120000-aaaaaa"
	t0 := time.Date(2026, 3, 12, 12, 0, 0, 0, time.UTC)
	v := func(name string, state agent.RunState, updated time.Time) *View {
		return &View{Conn: Conn{Host: config.Host{Name: name}}, Report: &agent.HostReport{Run: &agent.RunRecord{RunID: id, State: state, Updated: updated}}}
	}
	ag := Agree([]*View{v("h0", agent.RunRunning, t0), v("h1", agent.RunRunning, t0), v("h2", agent.RunSucceeded, t0.Add(time.Hour))})
	require.NotNil(t, ag.Run)
	assert.Equal(t, agent.RunRunning, ag.Run.State)
	ag = Agree([]*View{v("h0", agent.RunRunning, t0), v("h1", agent.RunRestarting, t0.Add(time.Second))})
	require.NotNil(t, ag.Run)
	assert.Equal(t, agent.RunRestarting, ag.Run.State, "two versions, one each: the newer")
}
