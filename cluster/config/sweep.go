package config

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Sweep is the job file's [sweep] table: what `drover sweep` does when
// its flags do not say (each flag overrides its key). The parameters'
// grammar is package launcher/sweep's, which reads SweepParam.Spec and
// names SweepParam.Source in its errors; this package checks only the
// table's shape.
type Sweep struct {
	// Params are [sweep.params]'s parameters, in file order.
	Params []SweepParam
	// Metric names the objective, as the trainer prints it (loss=0.5).
	Metric string
	// Goal is "minimize" or "maximize" (empty: not set).
	Goal string
	// EarlyStop is "median" or "none" (empty: not set).
	EarlyStop   string
	MetricRegex string
	// Zero means "not set" for each count.
	MaxParallel  int
	MinTrials    int
	Samples      int
	GPUsPerTrial int
	// HostsPerTrial is how many hosts each trial's run spans.
	HostsPerTrial int
	Seed          int64
	HasSeed       bool
}

// SweepParam is one parameter of [sweep.params]: `lr = "0.001,0.01"`,
// `seed = "0..3"`, `lr = "loguniform(1e-4,1e-1)"`, or an array of values
// (`opt = ["adam", "sgd"]`, `lr = [0.001, 0.01]`), which is a list.
type SweepParam struct {
	Name string
	// Spec is the string form; Values the array form (Spec empty).
	Spec   string
	Values []string
	// Source names the key with its file and line for errors.
	Source string
}

var sweepFields = []field{
	{"params", `[sweep.params] with lr = "0.001,0.01,0.1" and seed = "0..3"`},
	{"metric", `metric = "loss"`},
	{"goal", `goal = "minimize"`},
	{"early_stop", `early_stop = "median"`},
	{"metric_regex", `metric_regex = '(?P<name>\w+): (?P<value>[\d.]+)'`},
	{"max_parallel", `max_parallel = 4`},
	{"min_trials", `min_trials = 3`},
	{"samples", `samples = 20`},
	{"gpus_per_trial", `gpus_per_trial = 1`},
	{"hosts_per_trial", `hosts_per_trial = 2`},
	{"seed", `seed = 1`},
}

var sweepSchema = tableSchema{"[sweep]", sweepFields}

// sweepReader reads the [sweep] table: a concern of its own, beside
// jobReader's.
type sweepReader struct{ *walker }

// sweep reads [sweep]; an absent table is the zero Sweep.
func (w sweepReader) sweep(top tbl) Sweep {
	var s Sweep
	t, ok := w.table(top, "sweep", sweepSchema)
	if !ok {
		return s
	}
	w.unknown(t)
	s.Params = w.params(t)
	s.Metric, _ = w.str(t, "metric")
	s.Goal, _ = w.enum(t, "goal", "minimize", "maximize")
	s.EarlyStop, _ = w.enum(t, "early_stop", "median", "none")
	s.MetricRegex, _ = w.str(t, "metric_regex")
	s.MaxParallel, _ = w.integer(t, "max_parallel", 1, math.MaxInt32, "1 or more")
	s.MinTrials, _ = w.integer(t, "min_trials", 1, math.MaxInt32, "1 or more")
	s.Samples, _ = w.integer(t, "samples", 1, math.MaxInt32, "1 or more")
	s.GPUsPerTrial, _ = w.integer(t, "gpus_per_trial", 1, 1024, "between 1 and 1024")
	s.HostsPerTrial, _ = w.integer(t, "hosts_per_trial", 1, 4096, "between 1 and 4096")
	if n, ok := w.integer(t, "seed", 0, math.MaxInt64, "0 or more"); ok {
		s.Seed, s.HasSeed = int64(n), true
	}
	return s
}

// params reads [sweep.params] in file order: each value a string spec or
// an array of strings and numbers.
func (w sweepReader) params(t tbl) []SweepParam {
	v, ok := t.m["params"]
	if !ok {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		w.typeErr(t, "params", "a table", v)
		return nil
	}
	pt := keyPath(t.path, "params")
	var out []SweepParam
	for name, val := range m {
		key := keyPath(pt, name)
		p := SweepParam{Name: name, Source: fmt.Sprintf("%s:%d: %s", w.file, w.lines.lineOf(key), key)}
		switch x := val.(type) {
		case string:
			p.Spec = x
		case []any:
			for i, e := range x {
				switch e.(type) {
				case string, int64, float64, bool:
					p.Values = append(p.Values, strings.TrimSpace(fmt.Sprint(e)))
				default:
					w.add(key, fmt.Sprintf("element %d is %s, not a value", i+1, tomlType(e)), `write lr = [0.001, 0.01] or opt = ["adam", "sgd"]`)
				}
			}
			if len(x) == 0 {
				w.add(key, "the list of values is empty", `write at least one value: seed = [0, 1]`)
			}
		default:
			w.add(key, fmt.Sprintf("must be a string or an array, not %s (%s)", tomlType(val), show(val)),
				`write lr = "0.001,0.01", seed = "0..3", lr = "loguniform(1e-4,1e-1)" or opt = ["adam", "sgd"]`)
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		return w.lines.lineOf(keyPath(pt, out[i].Name)) < w.lines.lineOf(keyPath(pt, out[j].Name))
	})
	return out
}
