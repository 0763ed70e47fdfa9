package sweep

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

func TestResolve(t *testing.T) {
	file := config.Sweep{
		Params: []config.SweepParam{
			{Name: "lr", Spec: "0.1,0.2", Source: "job.toml:9: sweep.params.lr"},
			{Name: "opt", Values: []string{"adam", "sgd,nesterov"}, Source: "job.toml:10: sweep.params.opt"},
		},
		Metric: "acc", Goal: "maximize", EarlyStop: "median", MinTrials: 5, MaxParallel: 3,
	}
	cmd := []string{"python3", "train.py", "--lr={lr}", "--opt={opt}"}

	o, err := Resolve(Flags{}, file, cmd)
	require.NoError(t, err)
	assert.Len(t, o.Trials, 4)
	assert.Equal(t, map[string]string{"lr": "0.2", "opt": "sgd,nesterov"}, o.Trials[3].Params)
	assert.Equal(t, "acc", o.Metric)
	assert.Equal(t, Maximize, o.Goal)
	assert.Equal(t, &Median{Goal: Maximize, MinTrials: 5}, o.EarlyStop)
	assert.Equal(t, 3, o.MaxParallel)
	assert.Equal(t, 1, o.GPUsPerTrial)

	// Flags override the table; --param replaces [sweep.params] whole.
	o, err = Resolve(Flags{Params: []string{"lr=0.001,0.01,1.0", "seed=0..3"}, Metric: "loss", Goal: "minimize",
		EarlyStop: "none", GPUsPerTrial: 2}, file, []string{"train.py"})
	require.NoError(t, err)
	assert.Len(t, o.Trials, 12)
	assert.Equal(t, "loss", o.Metric)
	assert.Equal(t, Minimize, o.Goal)
	assert.Nil(t, o.EarlyStop)
	assert.Equal(t, 2, o.GPUsPerTrial)
	assert.Equal(t, "12 trials, minimize loss, 2 GPU(s) each, no early stopping", o.String())

	// Defaults: loss, minimize, no early stopping, min_trials 3 with median.
	o, err = Resolve(Flags{Params: []string{"seed=0..1"}, EarlyStop: "median"}, config.Sweep{}, []string{"train.py"})
	require.NoError(t, err)
	assert.Equal(t, "loss", o.Metric)
	assert.Equal(t, &Median{Goal: Minimize, MinTrials: 3}, o.EarlyStop)
}

func TestResolveErrors(t *testing.T) {
	cmd := []string{"train.py", "--lr={lr}"}
	for _, tc := range []struct {
		name  string
		flags Flags
		file  config.Sweep
		cmd   []string
		err   string
	}{
		{"unknown distribution", Flags{Params: []string{"lr=gauss(0,1)"}}, config.Sweep{}, cmd, `--param lr=gauss(0,1): parameter lr: unknown distribution "gauss"`},
		{"empty range in the file", Flags{}, config.Sweep{Params: []config.SweepParam{{Name: "lr", Spec: "3..1", Source: "job.toml:9: sweep.params.lr"}}}, cmd,
			"job.toml:9: sweep.params.lr: parameter lr: the range 3..1 is empty"},
		{"no such parameter", Flags{Params: []string{"lr=1,2"}}, config.Sweep{}, []string{"train.py", "{lr}", "{bs}"}, "[job] command: \"{bs}\" names {bs}, which is no parameter"},
		{"unused parameter", Flags{Params: []string{"lr=1,2", "bs=8,16"}}, config.Sweep{}, cmd, "--param bs=8,16: parameter bs is used by no trial"},
		{"goal flag", Flags{Params: []string{"lr=1"}, Goal: "up"}, config.Sweep{}, cmd, `--goal: unknown goal "up"`},
		{"early stop flag", Flags{Params: []string{"lr=1"}, EarlyStop: "hyperband"}, config.Sweep{}, cmd, `--early-stop: unknown early stopping rule "hyperband"`},
		{"regex in the file", Flags{Params: []string{"lr=1"}}, config.Sweep{MetricRegex: "("}, cmd, "[sweep] metric_regex: "},
		{"no parameters", Flags{}, config.Sweep{}, cmd, "--param: the sweep has no parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(tc.flags, tc.file, tc.cmd)
			var se *Error
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Contains(t, err.Error(), tc.err)
			assert.NotEmpty(t, se.Fix)
		})
	}
}
