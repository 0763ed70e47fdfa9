package elastic

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/plan"
)

func TestDecide(t *testing.T) {
	hosts := []string{"h1", "h2", "h3"}
	for _, tc := range []struct {
		name       string
		in         Input
		keep, drop []string
		why        string // "" for no error
	}{
		{name: "nothing lost", in: Input{Hosts: hosts}, keep: hosts},
		{name: "nothing lost, min_hosts unset", in: Input{Hosts: hosts, MinHosts: 0}, keep: hosts},
		{name: "one lost, min_hosts 2", in: Input{Hosts: hosts, Lost: []string{"h3"}, MinHosts: 2},
			keep: []string{"h1", "h2"}, drop: []string{"h3"}},
		{name: "the first host lost: the next leads", in: Input{Hosts: hosts, Lost: []string{"h1"}, MinHosts: 2},
			keep: []string{"h2", "h3"}, drop: []string{"h1"}},
		{name: "min_hosts unset keeps today's behaviour", in: Input{Hosts: hosts, Lost: []string{"h3"}},
			why: "min_hosts is unset"},
		{name: "below min_hosts", in: Input{Hosts: hosts, Lost: []string{"h2", "h3"}, MinHosts: 2},
			why: "1 host(s) left, fewer than min_hosts = 2"},
		{name: "min_hosts 1 down to one host", in: Input{Hosts: hosts, Lost: []string{"h3", "h1"}, MinHosts: 1},
			keep: []string{"h2"}, drop: []string{"h1", "h3"}},
		{name: "a lost host not in the group is ignored", in: Input{Hosts: hosts, Lost: []string{"h9"}, MinHosts: 3}, keep: hosts},
		{name: "min_hosts above the group", in: Input{Hosts: hosts, Lost: []string{"h3"}, MinHosts: 5},
			why: "2 host(s) left, fewer than min_hosts = 5"},
		{name: "tensorflow: a worker host shrinks", in: Input{Hosts: hosts, Lost: []string{"h3"}, MinHosts: 2, Pinned: map[string]string{"h1": "runs chief-0"}},
			keep: []string{"h1", "h2"}, drop: []string{"h3"}},
		{name: "tensorflow: the chief's host stays", in: Input{Hosts: hosts, Lost: []string{"h1"}, MinHosts: 1, Pinned: map[string]string{"h1": "runs chief-0"}},
			why: "h1 (runs chief-0) does not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.in)
			if tc.why != "" {
				var se *ShrinkError
				require.True(t, errors.As(err, &se), "err = %v", err)
				assert.Contains(t, se.Why, tc.why)
				assert.NotEmpty(t, se.Fix)
				assert.Contains(t, err.Error(), "cannot go on without ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.keep, d.Keep)
			assert.Equal(t, tc.drop, d.Drop)
		})
	}
}

// tfCfg is a chief + 3 workers TensorFlow job, one task per CPU host.
func tfCfg(worker int, auto bool) *config.Config {
	cfg := &config.Config{Path: "job.toml", Job: config.Job{Name: "tf", Framework: config.TensorFlow, Command: []string{"python3", "t.py"},
		ProcsPerHost: 1, BasePort: 2222, CheckpointDir: "c", Roles: config.Roles{Chief: 1, Worker: worker, WorkerAuto: auto}}}
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		cfg.Hosts = append(cfg.Hosts, config.Host{Name: n, Address: n, Workdir: "w"})
	}
	return cfg
}

func TestPinnedAndConfig(t *testing.T) {
	for _, auto := range []bool{false, true} {
		cfg := tfCfg(3, auto)
		full, err := plan.Build(plan.PlanInput{Config: cfg})
		require.NoError(t, err)
		pinned := Pinned(full)
		assert.Equal(t, map[string]string{"h1": "runs chief-0"}, pinned)
		d, err := Decide(Input{Hosts: []string{"h1", "h2", "h3", "h4"}, Lost: []string{"h3"}, MinHosts: 2, Pinned: pinned})
		require.NoError(t, err)
		shrunk := Config(cfg, full, d.Drop)
		pl, err := plan.Build(plan.PlanInput{Config: shrunk})
		require.NoError(t, err, "auto = %v", auto)
		var roles []string
		for _, p := range pl.Processes {
			roles = append(roles, p.Name()+"@"+p.Host.Name)
		}
		assert.Equal(t, []string{"chief-0@h1", "worker-0@h2", "worker-1@h4"}, roles, "auto = %v", auto)
		assert.Len(t, cfg.Hosts, 4, "cfg itself is left alone")
		assert.Equal(t, 3, cfg.Job.Roles.Worker)
	}
	torch := &config.Config{Path: "job.toml", Job: config.Job{Name: "t", Framework: config.PyTorch, Command: []string{"x"}, ProcsPerHost: 2, CheckpointDir: "c"},
		Hosts: []config.Host{{Name: "h1", Address: "h1"}, {Name: "h2", Address: "h2"}, {Name: "h3", Address: "h3"}}}
	full, err := plan.Build(plan.PlanInput{Config: torch})
	require.NoError(t, err)
	assert.Empty(t, Pinned(full))
	pl, err := plan.Build(plan.PlanInput{Config: Config(torch, full, []string{"h1"})})
	require.NoError(t, err)
	require.Len(t, pl.Processes, 4)
	assert.Equal(t, "h2", pl.Processes[0].Env["MASTER_ADDR"], "rank 0 moves to the first host left")
	assert.Equal(t, "4", pl.Processes[3].Env["WORLD_SIZE"])
}
