package config

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Readers of the values more than one table holds: names (of the job and
// of hosts), paths on the hosts and here (workdir, identity_file), and
// env tables ([job.env], [host.env]).

// nameRE is what host and job names may contain: they become parts of file
// names, log prefixes and directories.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (w *walker) name(t tbl, key, what string) (string, bool) {
	s, ok := w.str(t, key)
	if !ok {
		return "", false
	}
	if s == "" || s == "." || s == ".." || !nameRE.MatchString(s) {
		w.add(t.key(key), fmt.Sprintf("%s name %s may contain only letters, digits, '.', '_' and '-' (it becomes part of file names)", what, show(s)),
			fmt.Sprintf("write %s = %q", key, sanitizeName(s)))
		return s, false
	}
	return s, true
}

// sanitizeName proposes a valid name close to s.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 128 && nameRE.MatchString(string(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" || out == "." || out == ".." {
		return "gpu-a"
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

// remotePath reads a path resolved on each host: kept as written, except
// that a leading "~/" is dropped because relative paths already are under
// the login user's home (SFTP and exec do not expand "~").
func (w *walker) remotePath(t tbl, name string) (string, bool) {
	s, ok := w.str(t, name)
	if !ok {
		return "", false
	}
	switch {
	case strings.TrimSpace(s) == "":
		w.add(t.key(name), "must not be empty", "write "+t.schema.example(name))
		return "", false
	case strings.ContainsAny(s, "\x00\n\r"):
		w.add(t.key(name), "contains a control character", "write "+t.schema.example(name))
		return "", false
	case s == "~":
		return ".", true
	case strings.HasPrefix(s, "~/"):
		rest := strings.TrimLeft(s[2:], "/")
		if rest == "" {
			rest = "."
		}
		return rest, true
	case strings.HasPrefix(s, "~"):
		w.add(t.key(name), fmt.Sprintf("%s: ~user paths are not expanded on hosts", show(s)),
			"write a path relative to the login user's home or an absolute path, e.g. "+t.schema.example(name))
		return "", false
	}
	return s, true
}

// expandLocal expands ~ and makes p absolute relative to dir.
func expandLocal(p, dir string) (string, error) {
	if strings.HasPrefix(p, "~") {
		name, rest, _ := strings.Cut(p[1:], "/")
		var home string
		if name == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("expand %s: %w", p, err)
			}
			home = h
		} else {
			u, err := user.Lookup(name)
			if err != nil {
				return "", fmt.Errorf("expand %s: %w", p, err)
			}
			home = u.HomeDir
		}
		p = filepath.Join(home, rest)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), nil
}

// localPath reads a local file path (identity_file, known_hosts).
func (w *walker) localPath(t tbl, name, dir string) (string, bool) {
	s, ok := w.str(t, name)
	if !ok {
		return "", false
	}
	if s == "" {
		return "", true // explicit "" = the transport's default
	}
	p, err := expandLocal(s, dir)
	if err != nil {
		w.add(t.key(name), err.Error(), "write an absolute path instead")
		return "", false
	}
	return p, true
}

// env reads t's env table, [job.env] or a host's [host.env] as title
// says: shell-identifier names that drover does not set itself for
// framework fw (ReservedEnv), scalar values.
func (w *walker) env(t tbl, title string, fw Framework) map[string]string {
	out := map[string]string{}
	et, ok := w.table(t, "env", tableSchema{title, nil})
	if !ok {
		return out
	}
	names := make([]string, 0, len(et.m))
	for k := range et.m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		key := et.key(k)
		if !ValidEnvName(k) {
			w.add(key, fmt.Sprintf("%s is not a valid environment variable name", show(k)),
				fmt.Sprintf("use letters, digits and '_', not starting with a digit, e.g. %s", sanitizeEnv(k)))
			continue
		}
		if ReservedEnv(fw, k) {
			fix := "remove it from " + title
			if k == "CUDA_VISIBLE_DEVICES" {
				fix += "; choose GPUs with gpus = [...] on each [[host]]"
			}
			w.add(key, fmt.Sprintf("drover sets %s itself for %s jobs", k, fw), fix)
			continue
		}
		switch v := et.m[k].(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				w.add(key, "value contains a NUL byte", "remove the \\u0000 from the value")
				continue
			}
			out[k] = v
		case int64:
			out[k] = strconv.FormatInt(v, 10)
		case float64:
			out[k] = strconv.FormatFloat(v, 'g', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			w.add(key, fmt.Sprintf("value must be a string, not %s", tomlType(v)),
				fmt.Sprintf(`write %s = "value"`, k))
		}
	}
	return out
}

func sanitizeEnv(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 128 && (r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || out[0] >= '0' && out[0] <= '9' {
		out = "_" + out
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}
