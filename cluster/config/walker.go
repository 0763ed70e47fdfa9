package config

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// walker reads one decoded file (the job file or an inventory): it owns
// that file's error list and the typed readers every table shares (a
// string, an integer in a range, a duration, a list, a sub-table, the
// sweep for unknown keys), each of which records what is wrong with the
// key, with its line and a fix, instead of stopping at the first problem.
// What a table's keys mean is not its concern: jobReader, filesReader,
// hostsReader, slurmReader and inventoryReader read the tables and embed
// it for its readers and its error list.
type walker struct {
	file  string // as shown in errors
	lines keyLines
	errs  *ConfigErrors
	// top is the file's top-level table, to tell a missing key from one
	// written above its table header.
	top map[string]any
}

func (w *walker) add(key, msg, fix string) {
	w.addLine(w.lines.lineOf(key), key, msg, fix)
}

func (w *walker) addLine(line int, key, msg, fix string) {
	*w.errs = append(*w.errs, &ConfigError{File: w.file, Line: line, Key: key, Msg: msg, Fix: fix})
}

// unknown reports keys the schema does not know, in file order, each with
// a "did you mean" or a hint where the key belongs.
func (w *walker) unknown(t tbl) {
	var bad []string
	for k := range t.m {
		if !t.schema.has(k) {
			bad = append(bad, k)
		}
	}
	sort.Slice(bad, func(i, j int) bool {
		li, lj := w.lines.lineOf(t.key(bad[i])), w.lines.lineOf(t.key(bad[j]))
		if li != lj {
			return li < lj
		}
		return bad[i] < bad[j]
	})
	for _, k := range bad {
		w.add(t.key(k), fmt.Sprintf("unknown key %q in %s", k, t.schema.title), unknownFix(k, t.schema))
	}
}

// missing reports a required key that t lacks, unless an unknown key of t
// is a typo of it: that error already tells the user what to write.
func (w *walker) missing(t tbl, name, msg, fix string) {
	for k := range t.m {
		if !t.schema.has(k) && suggest(k, t.schema.names()) == name {
			return
		}
	}
	if _, misplaced := w.top[name]; misplaced && t.path != "" && !topSchema.has(name) {
		return // reported as "belongs in [job]"
	}
	w.add(t.key(name), msg, fix)
}

// hasErrorAt reports whether an error was already recorded for key or a
// key under it, so one mistake is not reported twice.
func (w *walker) hasErrorAt(key string) bool {
	for _, e := range *w.errs {
		if e.File == w.file && (e.Key == key || strings.HasPrefix(e.Key, key+".")) {
			return true
		}
	}
	return false
}

func (w *walker) typeErr(t tbl, name, want string, v any) {
	fix := "write " + t.schema.example(name)
	w.add(t.key(name), fmt.Sprintf("must be %s, not %s (%s)", want, tomlType(v), show(v)), fix)
}

// table returns the sub-table name of t; present is false when absent or
// not a table (which is reported).
func (w *walker) table(t tbl, name string, schema tableSchema) (sub tbl, present bool) {
	v, ok := t.m[name]
	if !ok {
		return tbl{m: map[string]any{}, path: t.key(name), schema: schema}, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		w.add(t.key(name), fmt.Sprintf("must be a table, not %s (%s)", tomlType(v), show(v)),
			"write it as a table: "+t.schema.example(name))
		return tbl{m: map[string]any{}, path: t.key(name), schema: schema}, false
	}
	return tbl{m: m, path: t.key(name), schema: schema}, true
}

func (w *walker) str(t tbl, name string) (string, bool) {
	v, ok := t.m[name]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		w.typeErr(t, name, "a string", v)
		return "", false
	}
	return s, true
}

func (w *walker) boolean(t tbl, name string) (bool, bool) {
	v, ok := t.m[name]
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		w.typeErr(t, name, "true or false", v)
		return false, false
	}
	return b, true
}

// integer reads an integer in [lo, hi]; out-of-range values are reported
// with why (e.g. "a port").
func (w *walker) integer(t tbl, name string, lo, hi int64, what string) (int, bool) {
	v, ok := t.m[name]
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	if !ok {
		w.typeErr(t, name, "an integer", v)
		return 0, false
	}
	if n < lo || n > hi {
		var msg string
		switch {
		case n < 0 && lo >= 0:
			msg = fmt.Sprintf("%d is negative; it must be %s", n, what)
		default:
			msg = fmt.Sprintf("%d is out of range; it must be %s", n, what)
		}
		w.add(t.key(name), msg, "write "+t.schema.example(name))
		return 0, false
	}
	return int(n), true
}

// port reads a TCP port number.
func (w *walker) port(t tbl, name string) (int, bool) {
	return w.integer(t, name, 1, 65535, "a port between 1 and 65535")
}

// count reads a non-negative count.
func (w *walker) count(t tbl, name string) (int, bool) {
	return w.integer(t, name, 0, math.MaxInt32, "0 or more")
}

// duration reads a Go duration string such as "1s" or "5m".
func (w *walker) duration(t tbl, name string) (time.Duration, bool) {
	v, ok := t.m[name]
	if !ok {
		return 0, false
	}
	s, ok := v.(string)
	if !ok {
		w.add(t.key(name), fmt.Sprintf("must be a duration string, not %s (%s)", tomlType(v), show(v)),
			"write a number with a unit in quotes: "+t.schema.example(name))
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		w.add(t.key(name), fmt.Sprintf("%q is not a duration", s),
			`use a number with a unit (ms, s, m, h): `+t.schema.example(name))
		return 0, false
	}
	if d < 0 {
		w.add(t.key(name), fmt.Sprintf("%q is negative", s), "write a positive duration: "+t.schema.example(name))
		return 0, false
	}
	return d, true
}

// enum reads a string that must be one of choices.
func (w *walker) enum(t tbl, name string, choices ...string) (string, bool) {
	s, ok := w.str(t, name)
	if !ok {
		return "", false
	}
	for _, c := range choices {
		if s == c {
			return s, true
		}
	}
	quoted := make([]string, len(choices))
	for i, c := range choices {
		quoted[i] = fmt.Sprintf("%s = %q", name, c)
	}
	fix := "write one of: " + strings.Join(quoted, ", ")
	if sg := suggest(s, choices); sg != "" {
		fix = fmt.Sprintf("did you mean %s = %q?", name, sg)
	}
	w.add(t.key(name), fmt.Sprintf("unknown %s %q", strings.ReplaceAll(name, "_", " "), s), fix)
	return "", false
}

// exitCodes reads an array of process exit statuses (1-255).
func (w *walker) exitCodes(t tbl, name string) ([]int, bool) {
	v, ok := t.m[name]
	if !ok {
		return nil, false
	}
	arr, ok := v.([]any)
	if !ok {
		w.typeErr(t, name, "an array of exit statuses", v)
		return nil, false
	}
	out := make([]int, 0, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok || n < 1 || n > 255 {
			w.add(t.key(name), fmt.Sprintf("element %d (%s) is not an exit status between 1 and 255", i+1, show(e)),
				"write "+t.schema.example(name)+" (a signal's status is 128 + its number: 137 for SIGKILL)")
			return nil, false
		}
		out = append(out, int(n))
	}
	return out, true
}

// strList reads an array of strings; non-strings are reported by index.
func (w *walker) strList(t tbl, name string) ([]string, bool) {
	v, ok := t.m[name]
	if !ok {
		return nil, false
	}
	arr, ok := v.([]any)
	if !ok {
		w.typeErr(t, name, "an array of strings", v)
		return nil, false
	}
	out := make([]string, 0, len(arr))
	good := true
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			w.add(t.key(name), fmt.Sprintf("element %d must be a string, not %s (%s)", i+1, tomlType(e), show(e)),
				"quote every element: "+t.schema.example(name))
			good = false
			continue
		}
		out = append(out, s)
	}
	return out, good
}
