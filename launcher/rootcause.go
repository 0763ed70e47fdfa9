package launcher

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
)

// maxCause bounds a root cause line: the exception's first line and where
// it was raised, not a whole traceback (that is in the process's log).
const maxCause = 300

// stderrTailBytes is how much of each process's stderr is kept for a root
// cause when the process wrote no error file.
const stderrTailBytes = 4 << 10

// causeLines is how many of the last stderr lines a cause shows.
const causeLines = 3

// torchErrorFile is what torch.distributed.elastic's @record writes to
// TORCHELASTIC_ERROR_FILE (errors/error_handler.py, record_exception):
// {"message": {"message": "RuntimeError: ...", "extraInfo":
// {"py_callstack": "Traceback ...", "timestamp": "..."}}}. An error file
// forwarded by torchrun (dump_error_file) has the same shape; "message"
// may also be a bare string.
type torchErrorFile struct {
	Message json.RawMessage `json:"message"`
}

type torchErrorMessage struct {
	Message   string `json:"message"`
	ExtraInfo struct {
		PyCallstack string `json:"py_callstack"`
	} `json:"extraInfo"`
}

// frameRE matches a traceback frame: `  File "/w/train.py", line 212, in main`.
var frameRE = regexp.MustCompile(`File "([^"]+)", line (\d+)`)

// parseErrorFile turns an error file into one line: the exception and the
// innermost frame it was raised in ("RuntimeError: CUDA out of memory
// (train.py:212)"). ok is false when b is not an error file.
func parseErrorFile(b []byte) (cause string, ok bool) {
	var f torchErrorFile
	if err := json.Unmarshal(b, &f); err != nil || len(f.Message) == 0 {
		return "", false
	}
	var m torchErrorMessage
	if err := json.Unmarshal(f.Message, &m); err != nil {
		if err := json.Unmarshal(f.Message, &m.Message); err != nil {
			return "", false
		}
	}
	msg := firstLine(m.Message)
	if msg == "" {
		return "", false
	}
	if frames := frameRE.FindAllStringSubmatch(m.ExtraInfo.PyCallstack, -1); len(frames) > 0 {
		last := frames[len(frames)-1]
		msg = clip(msg, maxCause-len(last[1])-len(last[2])-4)
		return fmt.Sprintf("%s (%s:%s)", msg, path.Base(last[1]), last[2]), true
	}
	return clip(msg, maxCause), true
}

// stderrCause is the fallback when there is no error file: the last few
// non-empty lines the process wrote to stderr, joined with " | ". The
// agent's own notes (agent.MessagePrefix) are not the process's words.
func stderrCause(tail string) string {
	var lines []string
	for _, l := range strings.Split(tail, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, agent.MessagePrefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	lines = lines[max(len(lines)-causeLines, 0):]
	return "stderr: " + clip(strings.Join(lines, " | "), maxCause)
}

// rootCause says why a failed process failed: its error file when it wrote
// one (a script under torch's @record, or torchrun forwarding its failed
// worker's), else the end of its stderr. errorFile is the process's
// TORCHELASTIC_ERROR_FILE ("" when it has none). The file's path is
// drover's (the plan's), its content the host's: read to a bound, and the
// cause escaped so that it prints as one line whatever the host wrote.
func rootCause(fsys cluster.FS, errorFile string, stderrTail string) string {
	if fsys != nil && path.IsAbs(errorFile) {
		if b, err := hostio.ReadSmall(fsys, errorFile, 1<<20); err == nil {
			if c, ok := parseErrorFile(b); ok {
				return cluster.Escape(c)
			}
		}
	}
	if c, ok := torchrunTableCause(stderrTail); ok {
		return cluster.Escape(c)
	}
	return cluster.Escape(stderrCause(stderrTail))
}

// torchrunTableCause reads the root cause out of the failure table
// torchrun prints when a worker fails (torch.distributed.elastic's
// ChildFailedError: "Root Cause (first observed failure):" then
// "host :", "rank :", "exitcode :", "traceback :" lines): the worker's
// rank, host, exit code and message, rather than the table's footer
// ("error_file: <N/A> | traceback : To enable traceback see: ... |
// ===="), which is what the last stderr lines of a torchrun are. drover's
// agent reports a dead worker itself (agent.WorkerExit); this is for the
// one it did not see (a worker reaped between two of its looks).
func torchrunTableCause(tail string) (string, bool) {
	i := strings.LastIndex(tail, "Root Cause (first observed failure):")
	if i < 0 {
		return "", false
	}
	field := map[string]string{}
	for _, l := range strings.Split(tail[i:], "\n")[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); field[k] == "" {
			field[k] = strings.TrimSpace(v)
		}
	}
	if field["rank"] == "" {
		return "", false
	}
	cause := "rank " + field["rank"]
	if h := field["host"]; h != "" {
		cause += " on " + h
	}
	if e := field["exitcode"]; e != "" {
		cause += " exitcode " + e
	}
	if tb := field["traceback"]; tb != "" && !strings.HasPrefix(tb, "To enable traceback") {
		cause += ": " + tb
	}
	return "torchrun: " + clip(cause, maxCause), true
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// clip shortens s to n bytes (at least 20), marking the cut.
func clip(s string, n int) string {
	n = max(n, 20)
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
