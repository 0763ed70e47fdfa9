package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/droverhq/drover/cluster/ignore"
)

// checkCheckpointMirror refuses a checkpoint_mirror that can only go
// wrong: the root, the job file's directory ("."), the code directory,
// the log directory, or a directory inside the code directory that the
// push does not exclude. drover writes a copy of every checkpoint there
// and prunes its old ones; inside the code, each was pushed to every host
// at every restart. dir is the job file's directory; j has code and
// exclude read.
func (w filesReader) checkCheckpointMirror(t tbl, j *Job, dir string) {
	m := j.CheckpointMirror
	if m == "" {
		return
	}
	raw, _ := t.m["checkpoint_mirror"].(string)
	m, code := filepath.Clean(m), filepath.Clean(j.Code)
	logs := filepath.Join(dir, "runs")
	outside := filepath.Join(filepath.Dir(code), j.Name+"-checkpoints")
	fix := fmt.Sprintf("write checkpoint_mirror = %q, a directory of its own outside the code directory", outside)
	var msg string
	switch rel, err := filepath.Rel(code, m); {
	case m == string(filepath.Separator):
		msg = fmt.Sprintf("checkpoint_mirror %s is the root directory", show(raw))
	case m == code:
		msg = fmt.Sprintf("checkpoint_mirror %s is the code directory %s: drover's copies would be pushed to every host at every restart", show(raw), code)
	case m == logs:
		msg = fmt.Sprintf("checkpoint_mirror %s is the log directory %s", show(raw), logs)
	case m == filepath.Clean(dir):
		msg = fmt.Sprintf("checkpoint_mirror %s is the job file's directory", show(raw))
	case err == nil && filepath.IsLocal(rel) && !within(logs, m) && !pushExcludes(code, j.Exclude, filepath.ToSlash(rel)):
		msg = fmt.Sprintf("checkpoint_mirror %s is inside the code directory %s and not excluded from the push: drover's copies would be pushed to every host at every restart", show(raw), code)
		fix = fmt.Sprintf("add %q to exclude under [job] (or to %s), or write checkpoint_mirror = %q, outside the code directory",
			filepath.ToSlash(rel)+"/", ignore.File, outside)
	default:
		return
	}
	w.add(t.key("checkpoint_mirror"), msg, fix)
}

// within reports whether p is dir or inside it (local paths, cleaned).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}

// pushExcludes reports whether a push of code leaves the directory rel
// (slash-separated, inside code) out, by the push's own rules: the
// code's .droverignore, then job.exclude. Patterns that do not compile
// are the push's to report; here they exclude nothing.
func pushExcludes(code string, exclude []string, rel string) bool {
	m := ignore.NewMatcher()
	if data, err := os.ReadFile(filepath.Join(code, ignore.File)); err == nil {
		_ = m.Add(ignore.File, strings.Split(string(data), "\n"))
	}
	_ = m.Add("job.exclude", exclude)
	return m.Excluded(rel, true)
}
