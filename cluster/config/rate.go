package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are the byte units a rate may use: SI (kB, MB, GB: powers of
// 1000, as disks and networks are sold) and binary (KiB, MiB, GiB).
var rateUnits = map[string]float64{
	"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
}

// ParseByteRate reads a rate such as "50MB/s", "1.5 GiB/s" or "0" (no cap)
// into bytes per second.
func ParseByteRate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	num, ok := strings.CutSuffix(t, "/s")
	if !ok {
		return 0, fmt.Errorf("%q is not a rate: it must end in /s", s)
	}
	i := strings.IndexFunc(num, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a rate: it must start with a number", s)
	}
	unit := strings.TrimSpace(num[i:])
	mult, ok := rateUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%q is not a rate: unknown unit %q (B, kB, MB, GB, KiB, MiB, GiB)", s, unit)
	}
	v, err := strconv.ParseFloat(num[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: %w", s, err)
	}
	r := v * mult
	if r < 1 || r > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is out of range: at least 1 B/s", s)
	}
	return int64(r), nil
}

// byteRate reads a rate string (ParseByteRate).
func (w *walker) byteRate(t tbl, name string) (int64, bool) {
	v, ok := t.m[name]
	if !ok {
		return 0, false
	}
	s, ok := v.(string)
	if !ok {
		w.add(t.key(name), fmt.Sprintf("must be a rate string, not %s (%s)", tomlType(v), show(v)),
			"write a number with a unit per second in quotes: "+t.schema.example(name))
		return 0, false
	}
	r, err := ParseByteRate(s)
	if err != nil {
		w.add(t.key(name), err.Error(), `write a number with a unit per second, or "0" for no cap: `+t.schema.example(name))
		return 0, false
	}
	return r, true
}
