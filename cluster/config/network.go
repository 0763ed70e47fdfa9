package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// PreflightNet is the preflight check `drover check net` does: the links
// between the job's hosts (see Job.Preflight).
const PreflightNet = "net"

// preflightChecks are the values preflight accepts.
var preflightChecks = []string{PreflightNet}

// bitUnits are the units a bandwidth may use: bits per second, SI
// (powers of 1000, as links are sold).
var bitUnits = map[string]float64{
	"bit": 1, "kbit": 1e3, "Kbit": 1e3, "Mbit": 1e6, "Gbit": 1e9, "Tbit": 1e12,
}

// ParseBandwidth reads a link speed such as "10Gbit", "50 Mbit/s" or
// "400Gbit" into bits per second.
func ParseBandwidth(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a bandwidth: it must start with a number", s)
	}
	unit := strings.TrimSpace(t[i:])
	mult, ok := bitUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%q is not a bandwidth: unknown unit %q (bit, kbit, Mbit, Gbit, Tbit)", s, unit)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a bandwidth: %w", s, err)
	}
	r := v * mult
	if r < 1 || math.IsInf(r, 0) || r > 1e15 {
		return 0, fmt.Errorf("%q is out of range: between 1bit and 1000Tbit", s)
	}
	return r, nil
}

// FormatBandwidth writes bits per second the way ParseBandwidth reads
// them: "9.41 Gbit/s".
func FormatBandwidth(bps float64) string {
	for _, u := range []struct {
		name string
		mult float64
	}{{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}} {
		if bps >= u.mult {
			return strconv.FormatFloat(bps/u.mult, 'f', 3, 64) + " " + u.name + "/s"
		}
	}
	return strconv.FormatFloat(bps, 'f', 0, 64) + " bit/s"
}

// network reads the job's link keys: min_bandwidth and preflight.
func (w jobReader) network(t tbl, j *Job) {
	if v, ok := t.m["min_bandwidth"]; ok {
		s, isStr := v.(string)
		if !isStr {
			w.typeErr(t, "min_bandwidth", "a bandwidth string", v)
		} else if r, err := ParseBandwidth(s); err != nil {
			w.add(t.key("min_bandwidth"), err.Error(), "write a number and a unit of bits per second: "+t.schema.example("min_bandwidth"))
		} else {
			j.MinBandwidth = r
		}
	}
	checks, ok := w.strList(t, "preflight")
	if !ok {
		return
	}
	for _, c := range checks {
		if !slices.Contains(preflightChecks, c) {
			w.add(t.key("preflight"), fmt.Sprintf("unknown check %q", c),
				fmt.Sprintf("the checks are %q: %s", preflightChecks, t.schema.example("preflight")))
			return
		}
	}
	j.Preflight = checks
}
