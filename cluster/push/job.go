package push

import (
	"path"
	"path/filepath"
	"strings"
)

// Job is what ForJob needs of the job file, as plain values: the launcher
// converts the job file's, so that push does not depend on its shape.
type Job struct {
	// File is the job file's path: the default log directory, runs/, is
	// next to it. "": no default.
	File string
	// Code is the local code directory that is pushed.
	Code string
	// Workdir is where the code lands on each host, as written.
	Workdir string
	// CheckpointDir is checkpoint_dir as written: relative to Workdir
	// unless absolute.
	CheckpointDir string
	// Exclude is job.exclude.
	Exclude []string
	// Protect are more paths relative to the workdir that no push sends,
	// overwrites or deletes (Options.Protect): what the job's setup makes
	// there, such as .venv.
	Protect []string
	// DataDests are the job's [[data]] destinations (relative to the
	// workdir unless absolute): what staging put there is the fleet's data,
	// never the code's, so a push protects each that lies in the workdir.
	DataDests []string
}

// ForJob is the one rule for what a job's push sends and leaves alone,
// shared by `drover push` and `drover run` so that the two never differ:
// the job's exclude patterns, and protected (never sent, overwritten or
// deleted on a host) the job's checkpoint_dir, its data destinations and
// the local log directory
// logRoot ("" is the default, runs/ next to the job file) when either lies
// inside the code directory. A checkpoint written by a local smoke test
// must not replace the fleet's, and deleting it locally must not delete
// the fleet's; logs of local runs are not code.
func ForJob(j Job, logRoot string) Options {
	opts := Options{Exclude: j.Exclude, Protect: append([]string(nil), j.Protect...)}
	for _, dir := range append([]string{j.CheckpointDir}, j.DataDests...) {
		if rel, ok := checkpointRel(j.Workdir, dir); ok {
			opts.Protect = append(opts.Protect, rel)
		}
	}
	if logRoot == "" && j.File != "" {
		logRoot = filepath.Join(filepath.Dir(j.File), "runs")
	}
	if logRoot != "" && j.Code != "" {
		rel, err := filepath.Rel(j.Code, logRoot)
		if err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			opts.Protect = append(opts.Protect, filepath.ToSlash(rel))
		}
	}
	return opts
}

// checkpointRel is checkpoint_dir relative to the workdir, when it lies
// strictly inside it: relative, or absolute (or ~/) below a workdir
// written the same way. A checkpoint_dir equal to or above the workdir
// protects nothing here (it is a configuration error of its own).
func checkpointRel(workdir, ckpt string) (string, bool) {
	if ckpt == "" {
		return "", false
	}
	home := func(p string) string { // "~/x" and "x" are the same place
		if p == "~" {
			return "."
		}
		return strings.TrimPrefix(p, "~/")
	}
	var rel string
	switch c := home(ckpt); {
	case !path.IsAbs(c) && !strings.HasPrefix(ckpt, "~"):
		rel = path.Clean(c)
	default:
		w := path.Clean(home(workdir))
		c = path.Clean(c)
		if w == "." && !path.IsAbs(c) {
			rel = c
			break
		}
		if path.IsAbs(w) != path.IsAbs(c) || !strings.HasPrefix(c, w+"/") {
			return "", false
		}
		rel = strings.TrimPrefix(c, w+"/")
	}
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return "", false
	}
	return rel, true
}
