package config

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// DataSet is one [[data]] table: a data set drover stages onto every
// host of the job (`drover stage`, and `drover run` before its first
// attempt), from a host of the fleet (SourceHost) or this machine.
type DataSet struct {
	// Name is the name key: processes find the destination in
	// DROVER_DATA_<NAME> (upper-cased) as well as DROVER_DATA_<i>.
	// "" when the table has none.
	Name string
	// SourceHost is the host the data set is read from ("HOST:PATH");
	// "" for a path on this machine (LocalSource).
	SourceHost string
	// Source is the path on SourceHost (as written: relative paths are
	// the login user's home), or the absolute local path.
	Source string
	// Dest is where the data set goes on every host: relative to the
	// host's workdir, or absolute.
	Dest string
	// Line is the line of the [[data]] table in the job file.
	Line int
}

// Local says the data set's source is on this machine.
func (d DataSet) Local() bool { return d.SourceHost == "" }

// Label names the data set in messages: its name, or data[i] (1-based
// as the job file's tables are counted).
func (d DataSet) Label(i int) string {
	if d.Name != "" {
		return fmt.Sprintf("data set %q", d.Name)
	}
	if d.Line == 0 {
		return fmt.Sprintf("data set %d", i+1)
	}
	return fmt.Sprintf("data set %d (line %d)", i+1, d.Line)
}

// DataEnvName is the variable that names data set i's destination to
// every process: DROVER_DATA_<i>; DataNameEnv the one for its name.
func DataEnvName(i int) string { return fmt.Sprintf("DROVER_DATA_%d", i) }

// DataNameEnv is DROVER_DATA_<NAME> for a named data set ("" for none).
func DataNameEnv(name string) string {
	if name == "" {
		return ""
	}
	return "DROVER_DATA_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

var dataFields = []field{
	{"name", `name = "imagenet"`},
	{"source", `source = "h1:/srv/imagenet" (or a local path, "./data")`},
	{"dest", `dest = "data/imagenet"`},
}

var dataSchema = tableSchema{"[[data]]", dataFields}

// dataNameRE is what a data set's name may be: it becomes part of an
// environment variable's name.
var dataNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// dataReader reads the [[data]] tables.
type dataReader struct{ *walker }

// data reads every [[data]] table; hosts (the fleet, read before) are
// what a "HOST:PATH" source may name. dir anchors local sources.
func (w dataReader) data(top tbl, dir string, hosts []Host) []DataSet {
	tables, ok := w.arrayTables(top, "data")
	if !ok {
		return nil
	}
	names := map[string]bool{}
	for _, h := range hosts {
		names[h.Name] = true
	}
	var out []DataSet
	seenName, seenDest := map[string]string{}, map[string]string{}
	for i, m := range tables {
		t := tbl{m: m, path: indexPath("data", i+1), schema: dataSchema}
		w.unknown(t)
		d := DataSet{Line: w.lines[t.path]}
		w.dataName(t, &d, seenName)
		w.dataSource(t, &d, dir, names)
		if s, ok := w.str(t, "dest"); ok {
			w.dataDest(t, &d, s, seenDest)
		} else if _, has := t.m["dest"]; !has {
			w.missing(t, "dest", "a [[data]] table needs dest", `write dest = "data/imagenet" (relative to the workdir, or absolute)`)
		}
		out = append(out, d)
	}
	return out
}

func (w dataReader) dataName(t tbl, d *DataSet, seen map[string]string) {
	s, ok := w.str(t, "name")
	if !ok {
		return
	}
	env := DataNameEnv(s)
	switch {
	case !dataNameRE.MatchString(s):
		w.add(t.key("name"), fmt.Sprintf("data set name %s may contain only letters, digits, '_' and '-', starting with a letter (it becomes DROVER_DATA_<NAME>)", show(s)),
			`write name = "imagenet"`)
	case seen[env] != "":
		w.add(t.key("name"), fmt.Sprintf("data set name %s gives %s, as %s does", show(s), env, show(seen[env])),
			"give each [[data]] table its own name")
	default:
		seen[env] = s
		d.Name = s
	}
}

func (w dataReader) dataSource(t tbl, d *DataSet, dir string, hosts map[string]bool) {
	s, ok := w.str(t, "source")
	if !ok {
		if _, has := t.m["source"]; !has {
			w.missing(t, "source", "a [[data]] table needs source", `write source = "h1:/srv/imagenet" (a host of the job and a path there) or a local path`)
		}
		return
	}
	host, p, remote := splitDataSource(s)
	switch {
	case strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\x00\n\r"):
		w.add(t.key("source"), fmt.Sprintf("%s is not a path", show(s)), "write "+dataSchema.example("source"))
	case remote && !hosts[host]:
		w.add(t.key("source"), fmt.Sprintf("%s names host %q, which is not a host of the job", show(s), host),
			"write the name of a [[host]] before the colon, or a local path (./"+s+" for a local file with a colon)")
	case remote && (p == "" || strings.HasPrefix(p, "~")):
		w.add(t.key("source"), fmt.Sprintf("%s has no usable path after the host", show(s)),
			fmt.Sprintf("write source = \"%s:/srv/data\" (absolute, or relative to the login user's home)", host))
	case remote:
		d.SourceHost, d.Source = host, path.Clean(p)
	default:
		lp, err := expandLocal(s, dir)
		if err != nil {
			w.add(t.key("source"), err.Error(), "write an absolute path instead")
			return
		}
		d.Source = lp
	}
}

// splitDataSource splits "HOST:PATH"; a string whose part before the
// first colon holds a slash, or that has none, is a local path.
func splitDataSource(s string) (host, p string, remote bool) {
	h, rest, ok := strings.Cut(s, ":")
	if !ok || h == "" || strings.Contains(h, "/") {
		return "", s, false
	}
	return h, rest, true
}

func (w dataReader) dataDest(t tbl, d *DataSet, s string, seen map[string]string) {
	c := path.Clean(s)
	first, _, _ := strings.Cut(c, "/")
	switch {
	case strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\x00\n\r") || strings.HasPrefix(s, "~"):
		w.add(t.key("dest"), fmt.Sprintf("%s is not a path drover takes for dest (empty, a control character, or ~)", show(s)),
			`write dest = "data/imagenet" (relative to the workdir) or an absolute path`)
	case c == "." || c == "/" || first == "..":
		w.add(t.key("dest"), fmt.Sprintf("%s is not a directory drover may fill (the workdir itself, /, or outside the workdir by ..)", show(s)),
			`write dest = "data/imagenet" (relative to the workdir) or an absolute path of its own`)
	case first == ".drover":
		w.add(t.key("dest"), fmt.Sprintf("%s is inside drover's own .drover directory", show(s)), `write dest = "data/imagenet"`)
	case seen[c] != "":
		w.add(t.key("dest"), fmt.Sprintf("dest %s is also the dest of %s", show(s), seen[c]), "give each [[data]] table its own dest")
	default:
		seen[c] = t.path
		d.Dest = c
	}
}

// arrayTables reads top-level name as an array of tables; ok is false
// when absent or wrong (with an error added).
func (w *walker) arrayTables(top tbl, name string) ([]map[string]any, bool) {
	switch v := top.m[name].(type) {
	case nil:
		return nil, false
	case []map[string]any:
		return v, true
	case []any:
		var out []map[string]any
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				w.add(indexPath(name, i+1), fmt.Sprintf("must be a table, not %s", tomlType(e)), fmt.Sprintf("write each as a [[%s]] table", name))
				continue
			}
			out = append(out, m)
		}
		return out, true
	default:
		w.add(name, fmt.Sprintf("must be [[%s]] tables, not %s", name, tomlType(v)), fmt.Sprintf("write [[%s]] (double brackets) above each", name))
		return nil, false
	}
}
