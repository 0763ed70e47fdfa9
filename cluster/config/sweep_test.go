package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sweepHosts = "host = [{ name = \"a\", address = \"10.0.0.1\" }]\n"

func TestLoadSweepTable(t *testing.T) {
	p := writeJob(t, tl(sweepHosts, slurmJobTable,
		`[sweep]`,
		`metric = "loss"`,
		`goal = "maximize"`,
		`early_stop = "median"`,
		`max_parallel = 4`,
		`min_trials = 2`,
		`samples = 8`,
		`gpus_per_trial = 2`,
		`hosts_per_trial = 3`,
		`seed = 0`,
		`metric_regex = '(?P<name>\w+): (?P<value>\S+)'`,
		`[sweep.params]`,
		`seed = "0..3"`,
		`lr = "loguniform(1e-4,1e-1)"`,
		`opt = ["adam", "sgd"]`,
		`wd = [0, 0.5]`,
	))
	cfg, err := Load(p, LoadOptions{})
	require.NoError(t, err)
	s := cfg.Sweep
	assert.Equal(t, []SweepParam{
		{Name: "seed", Spec: "0..3", Source: p + ":21: sweep.params.seed"},
		{Name: "lr", Spec: "loguniform(1e-4,1e-1)", Source: p + ":22: sweep.params.lr"},
		{Name: "opt", Values: []string{"adam", "sgd"}, Source: p + ":23: sweep.params.opt"},
		{Name: "wd", Values: []string{"0", "0.5"}, Source: p + ":24: sweep.params.wd"},
	}, s.Params, "in file order, each naming its line")
	s.Params = nil
	assert.Equal(t, Sweep{Metric: "loss", Goal: "maximize", EarlyStop: "median", MetricRegex: `(?P<name>\w+): (?P<value>\S+)`,
		MaxParallel: 4, MinTrials: 2, Samples: 8, GPUsPerTrial: 2, HostsPerTrial: 3, Seed: 0, HasSeed: true}, s)

	cfg, err = Load(writeJob(t, tl(sweepHosts, slurmJobTable)), LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, Sweep{}, cfg.Sweep, "no [sweep]: nothing set")
}

func TestLoadSweepTableErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, key, msg string
	}{
		{"goal", `goal = "lowest"`, "sweep.goal", `unknown goal "lowest"`},
		{"early_stop", `early_stop = "medain"`, "sweep.early_stop", `unknown early stop "medain"`},
		{"max_parallel", `max_parallel = 0`, "sweep.max_parallel", "0 is out of range; it must be 1 or more"},
		{"unknown key", `metrics = "loss"`, "sweep.metrics", `unknown key "metrics" in [sweep]`},
		{"param type", "[sweep.params]\nlr = 0.1", "sweep.params.lr", "must be a string or an array, not a float (0.1)"},
		{"param empty", "[sweep.params]\nlr = []", "sweep.params.lr", "the list of values is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeJob(t, tl(sweepHosts, slurmJobTable, "[sweep]", tc.body)), LoadOptions{})
			var ce ConfigErrors
			require.True(t, errors.As(err, &ce), "%v", err)
			require.NotEmpty(t, ce)
			assert.Equal(t, tc.key, ce[0].Key)
			assert.Contains(t, ce[0].Msg, tc.msg)
			assert.NotEmpty(t, ce[0].Fix)
			assert.NotZero(t, ce[0].Line)
		})
	}
}
