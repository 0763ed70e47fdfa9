package launcher

import (
	"io"
	"os"
	"path"
)

// logFileWriter is a process's local log file as its stream sees it: a
// write that fails (the log disk is full, or gone) is reported once per
// run and then swallowed, so that the stream goes on to the terminal and
// the remote process never blocks on its stdout. The file gets nothing
// more after its first failed write, so it ends at a whole line (the hosts
// keep the whole log in <workdir>/.drover/logs/).
type logFileWriter struct {
	f      *os.File
	r      *runner
	failed bool
}

// Write never fails.
func (w *logFileWriter) Write(p []byte) (int, error) {
	if w.failed {
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		w.failed = true
		w.r.logWriteFailed(w.f.Name(), err)
	}
	return len(p), nil
}

// logFile wraps a process's log file (see logFileWriter). Its sink
// serialises the writes, so the writer needs no lock of its own.
func (r *runner) logFile(f *os.File) io.Writer {
	return &logFileWriter{f: f, r: r}
}

// logWriteFailed says, once per run and loudly, that the local logs are
// incomplete and where the whole logs are.
func (r *runner) logWriteFailed(file string, err error) {
	r.logFailOnce.Do(func() {
		r.events.printf("WARNING: cannot write the local log %s: %v. The log files under %s are incomplete from here on; "+
			"output still streams to this terminal, and every host keeps the whole log in <workdir>/%s/attempt-<n>/. "+
			"The processes are not held up.", file, err, path.Dir(path.Dir(file)), hostLogDir)
	})
}

// hostLogDir is where the agent keeps each process's log on its host,
// under the workdir.
const hostLogDir = ".drover/logs"
