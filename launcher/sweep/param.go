package sweep

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// Kind is how a parameter's values are chosen.
type Kind string

// The kinds of parameter. List and Range are grid axes; Uniform,
// LogUniform and Choice are drawn, Samples times, for a random search.
const (
	List       Kind = "list"
	Range      Kind = "range"
	Uniform    Kind = "uniform"
	LogUniform Kind = "loguniform"
	Choice     Kind = "choice"
)

// Param is one swept parameter as written: `lr=0.001,0.01`,
// `seed=0..3`, `lr=loguniform(1e-4,1e-1)`, `opt=choice(adam,sgd)`.
type Param struct {
	Name string
	Kind Kind
	// Values are a List's or Range's values in order, or a Choice's.
	Values []string
	// Lo and Hi bound a Uniform or LogUniform draw.
	Lo, Hi float64
	// Source says where the parameter was written, for errors.
	Source string
}

// Random reports whether the parameter is drawn rather than enumerated.
func (p Param) Random() bool { return p.Kind == Uniform || p.Kind == LogUniform || p.Kind == Choice }

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// distRE is a distribution call: a name and its parenthesised arguments.
var distRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$`)

// ParseParam reads one `NAME=SPEC` (the --param flag's value); source
// names where it was written.
func ParseParam(source, s string) (Param, error) {
	name, spec, ok := strings.Cut(s, "=")
	name, spec = strings.TrimSpace(name), strings.TrimSpace(spec)
	if !ok || name == "" {
		return Param{}, errorf(source, "write NAME=a,b,c, NAME=LO..HI, NAME=uniform(a,b), NAME=loguniform(a,b) or NAME=choice(a,b)",
			"%q is not NAME=VALUES", s)
	}
	return ParseSpec(source, name, spec)
}

// ParseSpec reads one parameter's values; the job file's [sweep.params]
// table gives name and spec apart.
func ParseSpec(source, name, spec string) (Param, error) {
	p := Param{Name: name, Source: source}
	if !nameRE.MatchString(name) {
		return p, errorf(source, "use letters, digits and _ (it becomes {"+"NAME} and DROVER_PARAM_NAME)", "parameter name %q is not a name", name)
	}
	if spec == "" {
		return p, errorf(source, "write "+name+"=a,b,c or "+name+"=LO..HI", "parameter %s has no values", name)
	}
	if m := distRE.FindStringSubmatch(spec); m != nil {
		return parseDist(p, m[1], m[2])
	}
	if lo, hi, ok := strings.Cut(spec, ".."); ok {
		return parseRange(p, lo, hi)
	}
	p.Kind = List
	for _, v := range strings.Split(spec, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return p, errorf(source, "remove the empty element or write a value in it", "parameter %s has an empty value in %q", name, spec)
		}
		p.Values = append(p.Values, v)
	}
	return p, nil
}

func parseRange(p Param, los, his string) (Param, error) {
	lo, err1 := strconv.Atoi(strings.TrimSpace(los))
	hi, err2 := strconv.Atoi(strings.TrimSpace(his))
	if err1 != nil || err2 != nil {
		return p, errorf(p.Source, "a range is of integers, both ends included: "+p.Name+"=0..3; for real numbers use uniform(a,b)",
			"parameter %s: %q is not an integer range", p.Name, los+".."+his)
	}
	if hi < lo {
		return p, errorf(p.Source, fmt.Sprintf("write the low end first: %s=%d..%d", p.Name, hi, lo),
			"parameter %s: the range %d..%d is empty", p.Name, lo, hi)
	}
	if hi-lo >= 100000 {
		return p, errorf(p.Source, "sample it instead: "+p.Name+"=uniform(a,b) with --samples N",
			"parameter %s: the range %d..%d has %d values, too many trials for a grid", p.Name, lo, hi, hi-lo+1)
	}
	p.Kind = Range
	for v := lo; v <= hi; v++ {
		p.Values = append(p.Values, strconv.Itoa(v))
	}
	return p, nil
}

func parseDist(p Param, dist, args string) (Param, error) {
	var parts []string
	for _, a := range strings.Split(args, ",") {
		parts = append(parts, strings.TrimSpace(a))
	}
	switch Kind(dist) {
	case Choice:
		p.Kind = Choice
		for _, a := range parts {
			if a == "" {
				return p, errorf(p.Source, "write choice(a,b,c)", "parameter %s: choice(%s) has an empty choice", p.Name, args)
			}
		}
		p.Values = parts
		return p, nil
	case Uniform, LogUniform:
		p.Kind = Kind(dist)
	default:
		return p, errorf(p.Source, "the distributions are uniform(a,b), loguniform(a,b) and choice(a,b,...)",
			"parameter %s: unknown distribution %q", p.Name, dist)
	}
	bad := errorf(p.Source, fmt.Sprintf("write %s(LO,HI) with LO < HI, e.g. %s=%s(0.0001,0.1)", dist, p.Name, dist),
		"parameter %s: %s(%s) is not two numbers LO < HI", p.Name, dist, args)
	if len(parts) != 2 {
		return p, bad
	}
	lo, err1 := strconv.ParseFloat(parts[0], 64)
	hi, err2 := strconv.ParseFloat(parts[1], 64)
	if err1 != nil || err2 != nil || !(lo < hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return p, bad
	}
	if p.Kind == LogUniform && lo <= 0 {
		return p, errorf(p.Source, fmt.Sprintf("a log scale starts above 0: %s=loguniform(1e-5,%s)", p.Name, parts[1]),
			"parameter %s: loguniform(%s) starts at %s", p.Name, args, parts[0])
	}
	p.Lo, p.Hi = lo, hi
	return p, nil
}

// draw takes one value of a random parameter.
func (p Param) draw(r *rand.Rand) string {
	switch p.Kind {
	case Choice:
		return p.Values[r.IntN(len(p.Values))]
	case LogUniform:
		return formatFloat(math.Exp(math.Log(p.Lo) + r.Float64()*(math.Log(p.Hi)-math.Log(p.Lo))))
	default:
		return formatFloat(p.Lo + r.Float64()*(p.Hi-p.Lo))
	}
}

// formatFloat writes a drawn value short enough for a table and a
// command line, and still distinct between draws.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
