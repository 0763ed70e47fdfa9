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
// keep the whole log in <workdir>/.drover/logs/). A file that could not be
// created at all (f nil) takes nothing.
type logFileWriter struct {
	f      *os.File
	r      *runner
	failed bool
}

// Write never fails.
func (w *logFileWriter) Write(p []byte) (int, error) {
	if w.failed || w.f == nil {
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		w.failed = true
		w.r.logWriteFailed(path.Dir(path.Dir(w.f.Name())), err)
	}
	return len(p), nil
}

func (w *logFileWriter) Close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}

// createLog creates a process's local log file (see logFileWriter). Its
// sink serialises the writes, so the writer needs no lock of its own.
func (r *runner) createLog(file string) io.WriteCloser {
	f, err := os.Create(file)
	if err != nil {
		r.logWriteFailed(path.Dir(path.Dir(file)), err)
		f = nil
	}
	return &logFileWriter{f: f, r: r}
}

// makeLogDir creates an attempt's log directory. A restart on a full log
// disk goes on without local logs rather than failing: the files it then
// cannot create say so, once, in createLog.
func (r *runner) makeLogDir(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.logWriteFailed(path.Dir(dir), err)
	}
}

// logWriteFailed says, once per run and loudly, that the local logs under
// runDir are incomplete and where the whole logs are. err names the file
// and the operation (an *fs.PathError).
func (r *runner) logWriteFailed(runDir string, err error) {
	r.logFailOnce.Do(func() {
		r.events.printf("WARNING: cannot write the local logs (%v). The log files under %s are incomplete from here on; "+
			"output still streams to this terminal, and every host keeps the whole log in <workdir>/%s/attempt-<n>/. "+
			"The processes are not held up.", err, runDir, hostLogDir)
	})
}

// hostLogDir is where the agent keeps each process's log on its host,
// under the workdir.
const hostLogDir = ".drover/logs"
