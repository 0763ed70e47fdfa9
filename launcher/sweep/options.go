package sweep

import (
	"fmt"

	"github.com/droverhq/drover/cluster/config"
)

// Flags are drover sweep's flags as given; a zero value (or a nil
// pointer) is "not given", and the job file's [sweep] key applies.
type Flags struct {
	Params       []string // each --param NAME=SPEC
	Metric       string
	Goal         string
	EarlyStop    string
	MetricRegex  string
	MaxParallel  int
	MinTrials    int
	Samples      int
	GPUsPerTrial int
	// HostsPerTrial is --hosts-per-trial.
	HostsPerTrial int
	Seed          *uint64
}

// Options is a sweep ready to run: the flags over the [sweep] table, with
// the defaults applied and every value checked.
type Options struct {
	Params       []Param
	Trials       []Trial
	Metric       string
	Goal         Goal
	Collector    *Collector
	EarlyStop    *Median // nil: no early stopping
	MaxParallel  int     // 0: as many as the GPUs allow
	GPUsPerTrial int
	// HostsPerTrial is how many hosts each trial's run spans, each with
	// GPUsPerTrial GPUs.
	HostsPerTrial int
}

// Shape is what each trial asks for.
func (o *Options) Shape() Shape { return Shape{GPUs: o.GPUsPerTrial, Hosts: max(o.HostsPerTrial, 1)} }

// DefaultMetric is the objective when neither --metric nor [sweep]
// metric names one.
const DefaultMetric = "loss"

// Resolve merges the flags over the job file's [sweep] table, parses the
// parameters (--param replaces [sweep.params] as a whole, so a flag never
// mixes with a parameter it does not see), expands the trials and checks
// them against the job's command. Every error is an *Error naming the
// flag or the key, for exit 2.
func Resolve(f Flags, file config.Sweep, command []string) (*Options, error) {
	params, err := resolveParams(f.Params, file.Params)
	if err != nil {
		return nil, err
	}
	o := &Options{Params: params, Metric: first(f.Metric, file.Metric, DefaultMetric),
		MaxParallel: firstInt(f.MaxParallel, file.MaxParallel), GPUsPerTrial: firstInt(f.GPUsPerTrial, file.GPUsPerTrial, 1),
		HostsPerTrial: firstInt(f.HostsPerTrial, file.HostsPerTrial, 1)}
	if o.Goal, err = ParseGoal(source(f.Goal, "--goal", "[sweep] goal"), first(f.Goal, file.Goal)); err != nil {
		return nil, err
	}
	regex := first(f.MetricRegex, file.MetricRegex)
	if o.Collector, err = NewCollector(regex); err != nil {
		if f.MetricRegex == "" {
			err.(*Error).Source = "[sweep] metric_regex"
		}
		return nil, err
	}
	switch es := first(f.EarlyStop, file.EarlyStop, "none"); es {
	case "median":
		o.EarlyStop = &Median{Goal: o.Goal, MinTrials: firstInt(f.MinTrials, file.MinTrials, DefaultMinTrials)}
	case "none":
	default:
		return nil, errorf(source(f.EarlyStop, "--early-stop", "[sweep] early_stop"), "write median or none", "unknown early stopping rule %q", es)
	}
	seed := uint64(file.Seed)
	if f.Seed != nil {
		seed = *f.Seed
	}
	if o.Trials, err = Expand(params, firstInt(f.Samples, file.Samples), seed); err != nil {
		return nil, err
	}
	if err := CheckCommand(command, params); err != nil {
		return nil, err
	}
	return o, nil
}

func resolveParams(flags []string, file []config.SweepParam) ([]Param, error) {
	var out []Param
	if len(flags) > 0 {
		for _, s := range flags {
			p, err := ParseParam("--param "+s, s)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	for _, sp := range file {
		spec := sp.Spec
		if spec == "" {
			// An array of values is a list; its elements may hold commas.
			spec = "_"
		}
		p, err := ParseSpec(sp.Source, sp.Name, spec)
		if err != nil {
			return nil, err
		}
		if sp.Spec == "" {
			p.Values = sp.Values
		}
		out = append(out, p)
	}
	return out, nil
}

// source names the flag when it was given, else the job file's key.
func source(flag, flagName, key string) string {
	if flag != "" {
		return flagName
	}
	return key
}

func first(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstInt(n ...int) int {
	for _, v := range n {
		if v != 0 {
			return v
		}
	}
	return 0
}

// String is the sweep in one line, for its first event.
func (o *Options) String() string {
	es := "no early stopping"
	if o.EarlyStop != nil {
		es = fmt.Sprintf("median stopping after %d trials", o.EarlyStop.MinTrials)
	}
	each := fmt.Sprintf("%d GPU(s) each", o.GPUsPerTrial)
	if o.HostsPerTrial > 1 {
		each = fmt.Sprintf("%d hosts of %d GPU(s) each", o.HostsPerTrial, o.GPUsPerTrial)
	}
	return fmt.Sprintf("%d trials, %s %s, %s, %s", len(o.Trials), o.Goal, o.Metric, each, es)
}
