package sweep

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseParam(t *testing.T) {
	for _, tc := range []struct {
		in     string
		kind   Kind
		values []string
		lo, hi float64
		err    string // a part of the error; empty: no error
	}{
		{in: "lr=0.001,0.01,1.0", kind: List, values: []string{"0.001", "0.01", "1.0"}},
		{in: " opt = adam , sgd ", kind: List, values: []string{"adam", "sgd"}},
		{in: "x=only", kind: List, values: []string{"only"}},
		{in: "seed=0..3", kind: Range, values: []string{"0", "1", "2", "3"}},
		{in: "seed=-1..1", kind: Range, values: []string{"-1", "0", "1"}},
		{in: "seed=5..5", kind: Range, values: []string{"5"}},
		{in: "lr=uniform(0.1, 0.5)", kind: Uniform, lo: 0.1, hi: 0.5},
		{in: "lr=loguniform(1e-4,1e-1)", kind: LogUniform, lo: 1e-4, hi: 1e-1},
		{in: "opt=choice(adam,sgd)", kind: Choice, values: []string{"adam", "sgd"}},
		{in: "seed=3..0", err: "the range 3..0 is empty (fix: write the low end first: seed=0..3)"},
		{in: "seed=0..x", err: "is not an integer range"},
		{in: "seed=0..1000000", err: "too many trials"},
		{in: "lr=normal(0,1)", err: `unknown distribution "normal" (fix: the distributions are uniform(a,b), loguniform(a,b) and choice(a,b,...))`},
		{in: "lr=uniform(1,1)", err: "is not two numbers LO < HI"},
		{in: "lr=uniform(1)", err: "is not two numbers LO < HI"},
		{in: "lr=uniform(a,b)", err: "is not two numbers LO < HI"},
		{in: "lr=loguniform(0,1)", err: "starts at 0"},
		{in: "opt=choice(adam,)", err: "has an empty choice"},
		{in: "lr=", err: "has no values"},
		{in: "lr=a,,b", err: "empty value"},
		{in: "lr", err: "is not NAME=VALUES"},
		{in: "=1,2", err: "is not NAME=VALUES"},
		{in: "l-r=1,2", err: `parameter name "l-r" is not a name`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParseParam("--param "+tc.in, tc.in)
			if tc.err != "" {
				require.Error(t, err)
				var se *Error
				require.True(t, errors.As(err, &se), "a sweep.Error, which cmd/drover exits 2 for")
				assert.Equal(t, "--param "+tc.in, se.Source)
				assert.NotEmpty(t, se.Fix)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.kind, p.Kind)
			assert.Equal(t, tc.values, p.Values)
			assert.Equal(t, tc.lo, p.Lo)
			assert.Equal(t, tc.hi, p.Hi)
		})
	}
}

func params(t *testing.T, specs ...string) []Param {
	var ps []Param
	for _, s := range specs {
		p, err := ParseParam("--param "+s, s)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	return ps
}

func TestExpandGrid(t *testing.T) {
	trials, err := Expand(params(t, "lr=0.001,0.01,1.0", "seed=0..3"), 0, 0)
	require.NoError(t, err)
	require.Len(t, trials, 12)
	assert.Equal(t, Trial{ID: "t00", Params: map[string]string{"lr": "0.001", "seed": "0"}}, trials[0])
	assert.Equal(t, Trial{ID: "t03", Params: map[string]string{"lr": "0.001", "seed": "3"}}, trials[3])
	assert.Equal(t, Trial{ID: "t04", Params: map[string]string{"lr": "0.01", "seed": "0"}}, trials[4])
	assert.Equal(t, Trial{ID: "t11", Params: map[string]string{"lr": "1.0", "seed": "3"}}, trials[11])
	seen := map[[2]string]bool{}
	for _, tr := range trials {
		seen[[2]string{tr.Params["lr"], tr.Params["seed"]}] = true
	}
	assert.Len(t, seen, 12, "every point of the grid once")
}

func TestExpandRandom(t *testing.T) {
	ps := params(t, "lr=loguniform(1e-4,1e-1)", "opt=choice(adam,sgd)", "seed=0..1")
	a, err := Expand(ps, 5, 7)
	require.NoError(t, err)
	require.Len(t, a, 10, "the grid of seed times 5 draws")
	b, err := Expand(ps, 5, 7)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the same seed draws the same trials")
	c, err := Expand(ps, 5, 8)
	require.NoError(t, err)
	assert.NotEqual(t, a, c, "another seed draws others")
	for _, tr := range a {
		lr := tr.Params["lr"]
		assert.Regexp(t, `^[0-9.e-]+$`, lr)
		assert.Contains(t, []string{"adam", "sgd"}, tr.Params["opt"])
	}
	assert.Equal(t, "0", a[0].Params["seed"])
	assert.Equal(t, "1", a[9].Params["seed"])
}

func TestExpandErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		specs   []string
		samples int
		err     string
	}{
		{"none", nil, 0, "the sweep has no parameters"},
		{"random without samples", []string{"lr=uniform(0,1)"}, 0, "--samples: a random parameter needs --samples N"},
		{"samples without random", []string{"lr=1,2"}, 3, "--samples: --samples 3 draws random parameters, and none is random"},
		{"twice", []string{"lr=1,2", "lr=3"}, 0, "--param lr=3: parameter lr is given twice"},
		{"too many", []string{"a=0..99", "b=0..99", "c=0..1"}, 0, "more than 10000 trials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []Param
			if tc.specs != nil {
				ps = params(t, tc.specs...)
			}
			_, err := Expand(ps, tc.samples, 1)
			var se *Error
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Contains(t, err.Error(), tc.err)
			assert.NotEmpty(t, se.Fix)
		})
	}
}

func TestCheckCommandAndSubstitute(t *testing.T) {
	ps := params(t, "lr=0.1,0.2", "seed=0..1")
	for _, tc := range []struct {
		name    string
		command []string
		err     string
	}{
		{"both named", []string{"python3", "train.py", "--lr={lr}", "--seed", "{seed}"}, ""},
		{"none named: env only", []string{"python3", "train.py"}, ""},
		{"unknown name", []string{"train.py", "--lr={lr}", "--seed={sed}"}, `[job] command: "--seed={sed}" names {sed}, which is no parameter of the sweep (fix: add --param sed=... or correct the name (the parameters are lr, seed))`},
		{"one unused", []string{"train.py", "--lr={lr}"}, "--param seed=0..1: parameter seed is used by no trial: the command names other parameters but not {seed} (fix: put {seed} in the job's command, or drop the parameter)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCommand(tc.command, ps)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			var se *Error
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
	tr := Trial{ID: "t3", Params: map[string]string{"lr": "0.1", "seed": "1"}}
	assert.Equal(t, []string{"train.py", "--lr=0.1", "--seed", "1", "{other}"},
		tr.Command([]string{"train.py", "--lr={lr}", "--seed", "{seed}", "{other}"}))
	assert.Equal(t, map[string]string{"DROVER_TRIAL_ID": "t3", "DROVER_SWEEP_ID": "sw", "DROVER_PARAM_LR": "0.1", "DROVER_PARAM_SEED": "1"}, tr.Env("sw"))
}
