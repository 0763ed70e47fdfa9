package push

import (
	"io/fs"
	"os"
)

// StdOutputs are this process's stdout and stderr where they are regular
// files (`drover run job.toml > run.log 2>&1`), for Options.Outputs: a
// terminal, a pipe (`| tee run.log`, whose file changes under the push
// instead: changing.go) or /dev/null is none. Found by the open files'
// identity (fstat), not by a name, so a redirect into the code directory
// is found whatever its path.
func StdOutputs() []fs.FileInfo {
	return regularOutputs(os.Stdout, os.Stderr)
}

// regularOutputs are the stats of those of files that are regular files.
func regularOutputs(files ...*os.File) []fs.FileInfo {
	var out []fs.FileInfo
	for _, f := range files {
		if f == nil {
			continue
		}
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			out = append(out, st)
		}
	}
	return out
}
