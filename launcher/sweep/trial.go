package sweep

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
)

// Trial is one run of the sweep: its id and the value of every
// parameter.
type Trial struct {
	// ID is "t" and the trial's index, zero-padded to the sweep's width
	// ("t00".."t11"): it names the trial's workdir subdirectory and is
	// its DROVER_TRIAL_ID.
	ID string
	// Params holds each parameter's value, by name.
	Params map[string]string
}

// MaxTrials bounds a sweep's size: a grid that multiplies past it is a
// mistake, not an experiment.
const MaxTrials = 10000

// Expand lists the sweep's trials: the grid of the List and Range
// parameters (the first parameter varying slowest), times samples draws of
// the random ones (uniform, loguniform, choice) from a generator seeded
// with seed, so the same flags give the same trials.
func Expand(params []Param, samples int, seed uint64) ([]Trial, error) {
	if len(params) == 0 {
		return nil, errorf("--param", "name at least one parameter: --param lr=0.001,0.01 or a [sweep.params] table", "the sweep has no parameters")
	}
	seen := map[string]bool{}
	random := false
	for _, p := range params {
		if seen[p.Name] {
			return nil, errorf(p.Source, "name each parameter once", "parameter %s is given twice", p.Name)
		}
		seen[p.Name] = true
		random = random || p.Random()
	}
	switch {
	case random && samples < 1:
		return nil, errorf("--samples", "say how many draws: --samples 20", "a random parameter needs --samples N (N ≥ 1)")
	case !random && samples > 0:
		return nil, errorf("--samples", "drop --samples, or make a parameter random: uniform(a,b), loguniform(a,b) or choice(a,b)",
			"--samples %d draws random parameters, and none is random", samples)
	case !random:
		samples = 1
	}
	n := samples
	for _, p := range params {
		if !p.Random() {
			n *= len(p.Values)
		}
		if n > MaxTrials {
			return nil, errorf(p.Source, "sweep fewer values, or sample: uniform(a,b) with --samples N",
				"the sweep has more than %d trials", MaxTrials)
		}
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	trials := make([]Trial, 0, n)
	width := len(fmt.Sprint(n - 1))
	for i := range n {
		t := Trial{ID: fmt.Sprintf("t%0*d", width, i), Params: map[string]string{}}
		rest := i / samples // the grid point; i % samples is the draw
		for j := len(params) - 1; j >= 0; j-- {
			if p := params[j]; !p.Random() {
				t.Params[p.Name] = p.Values[rest%len(p.Values)]
				rest /= len(p.Values)
			}
		}
		for _, p := range params {
			if p.Random() {
				t.Params[p.Name] = p.draw(r)
			}
		}
		trials = append(trials, t)
	}
	return trials, nil
}

var refRE = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// CheckCommand refuses a command that names a parameter the sweep lacks
// ({NAME} would reach the trainer as written) and, when the command uses
// {NAME} at all, a parameter it never names: such a parameter would make
// trials that differ only in their environment, almost always a typo.
// A command with no {NAME} takes every parameter from DROVER_PARAM_<NAME>.
func CheckCommand(command []string, params []Param) error {
	names := map[string]bool{}
	for _, p := range params {
		names[p.Name] = true
	}
	used := map[string]bool{}
	for _, a := range command {
		for _, m := range refRE.FindAllStringSubmatch(a, -1) {
			if !names[m[1]] {
				return errorf("[job] command", fmt.Sprintf("add --param %s=... or correct the name (the parameters are %s)", m[1], strings.Join(sortedNames(names), ", ")),
					"%q names {%s}, which is no parameter of the sweep", a, m[1])
			}
			used[m[1]] = true
		}
	}
	if len(used) == 0 {
		return nil
	}
	for _, p := range params {
		if !used[p.Name] {
			return errorf(p.Source, fmt.Sprintf("put {%s} in the job's command, or drop the parameter", p.Name),
				"parameter %s is used by no trial: the command names other parameters but not {%s}", p.Name, p.Name)
		}
	}
	return nil
}

func sortedNames(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Command returns command with each {NAME} replaced by the trial's value.
func (t Trial) Command(command []string) []string {
	out := make([]string, len(command))
	for i, a := range command {
		out[i] = refRE.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := t.Params[ref[1:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return out
}

// Env is what a trial adds to every process's environment:
// DROVER_PARAM_<NAME> (the name upper-cased) for each parameter,
// DROVER_TRIAL_ID and DROVER_SWEEP_ID.
func (t Trial) Env(sweepID string) map[string]string {
	env := map[string]string{"DROVER_TRIAL_ID": t.ID, "DROVER_SWEEP_ID": sweepID}
	for k, v := range t.Params {
		env["DROVER_PARAM_"+strings.ToUpper(k)] = v
	}
	return env
}
