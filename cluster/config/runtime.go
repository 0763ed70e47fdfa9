package config

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/droverhq/drover/cluster/ignore"
)

// Checks of values that are well-formed TOML and of the right type but
// would only fail once a run is under way (issue 21): each is a
// configuration error at load time instead, with its file and line.

// MaxJobName bounds a job name: it names the run's log directory,
// <name>-YYYYMMDD-HHMMSS[-N] (up to 20 more bytes), which must fit in a
// file name (255 bytes on Linux, macOS and Windows file systems).
const MaxJobName = 200

// checkJobName reports a name too long to become a file name.
func (w jobReader) checkJobName(t tbl, name string) {
	if len(name) > MaxJobName {
		w.add(t.key("name"), fmt.Sprintf("job name is %d bytes long; at most %d fit in the log directory's name (%s-YYYYMMDD-HHMMSS)", len(name), MaxJobName, "<name>"),
			fmt.Sprintf("write name = %q", name[:40]))
	}
}

// checkArgs reports a NUL byte in an argument, which no exec can pass.
func (w jobReader) checkArgs(t tbl, args []string) bool {
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			w.add(t.key("command"), fmt.Sprintf("element %d contains a NUL byte, which no program can receive as an argument", i+1),
				`remove the \u0000 from the element`)
			return false
		}
	}
	return true
}

// checkCheckpointDir reports a checkpoint_dir that is the workdir, or
// the workdir's or the home directory's parent or above: drover takes the
// newest entry there for a checkpoint (with ".", a source file became
// DROVER_RESUME_FROM) and training code writes into it. Relative paths
// are under the workdir; an absolute one is compared with an absolute
// workdir here, and with the home directory once it is known (the plan).
func (w filesReader) checkCheckpointDir(t tbl, ckpt string, workdirs ...string) {
	if msg := CheckpointDirProblem(ckpt, "", workdirs...); msg != "" {
		w.add(t.key("checkpoint_dir"), msg,
			`write checkpoint_dir = "checkpoints" (a directory inside the workdir) or an absolute path of its own`)
	}
}

// CheckpointDirProblem says what is wrong with checkpoint_dir ckpt for
// the given workdirs (relative to home; home may be unknown, ""), or "".
func CheckpointDirProblem(ckpt, home string, workdirs ...string) string {
	if !path.IsAbs(ckpt) {
		return relativeCheckpointDirProblem(ckpt, workdirs)
	}
	c := path.Clean(ckpt)
	above := func(dir string) bool { return c == dir || c == "/" || strings.HasPrefix(dir, c+"/") }
	var abs []string
	for _, wd := range workdirs {
		if !path.IsAbs(wd) && home != "" {
			wd = path.Join(home, wd)
		}
		if path.IsAbs(wd) {
			abs = append(abs, path.Clean(wd))
		}
	}
	for _, wd := range abs {
		if c == wd {
			return fmt.Sprintf("checkpoint_dir %s is the workdir itself", show(ckpt))
		}
		if own := path.Join(wd, ignore.StateDir); c == own || strings.HasPrefix(c, own+"/") {
			return ownDirProblem(ckpt)
		}
	}
	if c == "/" || (home != "" && above(path.Clean(home))) {
		return fmt.Sprintf("checkpoint_dir %s is the home directory or above it", show(ckpt))
	}
	for _, wd := range abs {
		if above(wd) {
			return fmt.Sprintf("checkpoint_dir %s is above the workdir %s", show(ckpt), wd)
		}
	}
	return ""
}

// relativeCheckpointDirProblem is CheckpointDirProblem for a checkpoint_dir
// relative to the workdir: the workdir itself or above it, drover's own
// directory in it, or, from a workdir relative to the home directory, a
// place outside the home's tree, which only an absolute path says on
// purpose ("../../../data" from drover/j is the home's parent's data).
func relativeCheckpointDirProblem(ckpt string, workdirs []string) string {
	c := path.Clean(ckpt)
	switch {
	case c == ".":
		return fmt.Sprintf("checkpoint_dir %s is the workdir itself", show(ckpt))
	case c == ignore.StateDir || strings.HasPrefix(c, ignore.StateDir+"/"):
		return ownDirProblem(ckpt)
	case !slices.ContainsFunc(strings.Split(c, "/"), func(p string) bool { return p != ".." }):
		return fmt.Sprintf("checkpoint_dir %s is above the workdir", show(ckpt))
	}
	for _, wd := range workdirs {
		if path.IsAbs(wd) {
			continue
		}
		if j := path.Join(wd, c); j == ".." || strings.HasPrefix(j, "../") {
			return fmt.Sprintf("checkpoint_dir %s is outside the home directory (the workdir %s is relative to the home, and %s leads out of it)", show(ckpt), show(wd), show(ckpt))
		}
	}
	return ""
}

// ownDirProblem is a checkpoint_dir that is (or is inside) <workdir>/.drover,
// where drover keeps its copies of checkpoints: each copy was taken for a
// new checkpoint and copied into itself, and checkpoint_keep's pruning of
// drover's copies deleted the user's own checkpoints.
func ownDirProblem(ckpt string) string {
	return fmt.Sprintf("checkpoint_dir %s is inside the workdir's .drover, where drover keeps its own copies of checkpoints (copies would nest forever and pruning them would delete yours)", show(ckpt))
}

// LocateLines fills in the line of configuration errors found after
// loading (by the plan, which knows keys but not lines) by finding their
// key in their file. The error is returned for chaining; errors whose
// file cannot be read keep line 0.
func LocateLines(err error) error {
	var es []*ConfigError
	var one *ConfigError
	var many ConfigErrors
	switch {
	case errors.As(err, &many):
		es = many
	case errors.As(err, &one):
		es = []*ConfigError{one}
	}
	files := map[string]keyLines{}
	for _, e := range es {
		if e.Line != 0 || e.Key == "" || e.File == "" {
			continue
		}
		kl, ok := files[e.File]
		if !ok {
			if src, rerr := os.ReadFile(e.File); rerr == nil {
				kl = locateKeys(src)
			}
			files[e.File] = kl
		}
		e.Line = kl.lineOf(e.Key)
	}
	return err
}
