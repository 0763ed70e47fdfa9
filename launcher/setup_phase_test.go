package launcher

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster/config"
)

// TestSetupPhasePending: the setup phase sets up the hosts this run has
// not: all of them at the first attempt, none at a restart of the same
// hosts, only the spare that joins; and none for a job without setup.
func TestSetupPhasePending(t *testing.T) {
	cfg := &config.Config{Job: config.Job{Setup: []string{"uv sync --frozen"}}}
	conns := func(names ...string) []*attemptHost {
		var hcs []*hostConn
		for _, n := range names {
			hcs = append(hcs, &hostConn{host: config.Host{Name: n, Workdir: "drover/j"}, home: "/home/u"})
		}
		return newAttemptHosts(hcs)
	}
	names := func(p *setupPhase, cs []*attemptHost) []string {
		var out []string
		for _, h := range p.pending(cs) {
			assert.Equal(t, "/home/u/drover/j", h.Workdir)
			out = append(out, h.Name)
		}
		return out
	}
	done := &setupDone{}
	p := &setupPhase{phaseEnv: phaseEnv{cfg: cfg}, done: done}
	assert.Equal(t, []string{"a", "b", "c"}, names(p, conns("a", "b", "c")), "first attempt: every host")
	for _, n := range []string{"a", "b", "c"} {
		done.add(n)
	}
	assert.Empty(t, names(p, conns("a", "b", "c")), "a restart of the same hosts")
	assert.Equal(t, []string{"spare"}, names(p, conns("a", "spare", "c")), "a spare in place of b")
	assert.Empty(t, names(&setupPhase{phaseEnv: phaseEnv{cfg: &config.Config{}}, done: &setupDone{}}, conns("a")), "no setup")
	assert.Empty(t, (*setupPhase)(nil).pending(conns("a")), "a check without a setup phase")
}
