package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// workerPoll is how often the agent looks at torchrun's workers. torch
// 1.13's torchrun looks at them every 5 s (--monitor_interval) and reaps
// a dead one only then, so its zombie, with its exit status, is there to
// be seen for that long.
const workerPoll = 50 * time.Millisecond

// workerReportMark separates a worker report's words from its JSON (see
// WorkerExit.Line).
const workerReportMark = "; report "

// WorkerExit is how one of torchrun's workers ended, as the agent saw it
// (RunOptions.WatchWorkers). The agent writes it as one line of its own
// (Line) into the command's stderr and log; drover reads it back
// (ParseWorkerExit) the moment it arrives, by its own clock.
type WorkerExit struct {
	// Rank and LocalRank are the worker's RANK and LOCAL_RANK (-1 when
	// it had none).
	Rank      int `json:"rank"`
	LocalRank int `json:"local_rank"`
	Pid       int `json:"pid"`
	// Status is the exit status as a shell reports it (128+n for signal
	// n); Signal the signal's name without "SIG" ("KILL"), or "".
	Status int    `json:"status"`
	Signal string `json:"signal,omitempty"`
	// Stderr is the end of the worker's own stderr, when torchrun
	// redirected it to a file (--redirects): its last lines, " | "-joined.
	Stderr string `json:"stderr,omitempty"`
	// ErrorFile is the worker's TORCHELASTIC_ERROR_FILE (torchrun gives
	// each worker its own), where torch's @record writes the exception.
	ErrorFile string `json:"error_file,omitempty"`
	// Running is how many other workers of this torchrun still ran.
	Running int `json:"running"`
}

// Abnormal reports whether the worker failed: any status but 0.
func (w WorkerExit) Abnormal() bool { return w.Status != 0 }

// How is the exit in words: "exited 1", "killed by SIGKILL (137)".
func (w WorkerExit) How() string {
	if w.Signal != "" {
		return fmt.Sprintf("killed by SIG%s (%d)", w.Signal, w.Status)
	}
	return fmt.Sprintf("exited %d", w.Status)
}

// Who names the worker: "rank 3 (local rank 1, pid 4242)".
func (w WorkerExit) Who() string {
	return fmt.Sprintf("rank %d (local rank %d, pid %d)", w.Rank, w.LocalRank, w.Pid)
}

// Line is the report as the agent writes it: words for whoever reads the
// log, then the JSON drover parses.
func (w WorkerExit) Line() string {
	b, _ := json.Marshal(w) // a struct of strings and ints always encodes
	return fmt.Sprintf("%sworker %s %s%s%s", MessagePrefix, w.Who(), w.How(), workerReportMark, b)
}

// ParseWorkerExit reads a line written by WorkerExit.Line; ok is false for
// any other line.
func ParseWorkerExit(line string) (WorkerExit, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), MessagePrefix+"worker ")
	if !ok {
		return WorkerExit{}, false
	}
	i := strings.LastIndex(rest, workerReportMark)
	if i < 0 {
		return WorkerExit{}, false
	}
	var w WorkerExit
	if err := json.Unmarshal([]byte(rest[i+len(workerReportMark):]), &w); err != nil {
		return WorkerExit{}, false
	}
	return w, true
}

// workerExited acts on a worker's end: it is reported in the command's
// stderr and log, and the first abnormal one before any stop stops the
// group at once.
func (s *supervision) workerExited(w WorkerExit) {
	s.notice("%s", strings.TrimPrefix(w.Line(), MessagePrefix))
	if !w.Abnormal() || s.failed != nil || s.state != noStop {
		// A worker that dies of a stop under way is that stop's doing.
		return
	}
	s.failed = &w
	s.escalate(request{gracefulStop, "worker " + w.Who() + " " + w.How()})
}

// watchedWorker is what the watch learnt of a worker when it first saw it
// (its environment and stderr cannot be read once it has exited).
type watchedWorker struct {
	rank, localRank int
	stderr, errFile string
}

// watchWorkers reports, until done closes, the end of every child of
// parent (torchrun's workers) that the agent sees exit: a zombie's status
// is read from /proc before torchrun reaps it. A worker reaped between
// two looks is not reported (torchrun itself then acts on it).
func watchWorkers(parent int, done <-chan struct{}) <-chan WorkerExit {
	out := make(chan WorkerExit, 16)
	go func() {
		known := map[int]*watchedWorker{}
		tick := time.NewTicker(workerPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, w := range lookAtWorkers(parent, known) {
				select {
				case out <- w:
				case <-done:
					return
				}
			}
		}
	}()
	return out
}

// lookAtWorkers notes parent's new children in known and returns the ends
// of those that exited since the last look.
func lookAtWorkers(parent int, known map[int]*watchedWorker) []WorkerExit {
	for _, pid := range childrenOf(parent) {
		if _, ok := known[pid]; ok {
			continue
		}
		env := procEnviron(pid)
		if env == nil || env["RANK"] == "" {
			continue // not a worker yet (or not one at all)
		}
		known[pid] = &watchedWorker{rank: atoiOr(env["RANK"], -1), localRank: atoiOr(env["LOCAL_RANK"], -1),
			stderr: stderrFile(pid), errFile: env["TORCHELASTIC_ERROR_FILE"]}
	}
	var ended []WorkerExit
	for pid, k := range known {
		ws, zombie := exitStatus(pid)
		if !zombie {
			if !liveProcess(pid, 0) {
				delete(known, pid) // reaped between two looks
			}
			continue
		}
		delete(known, pid)
		w := WorkerExit{Rank: k.rank, LocalRank: k.localRank, Pid: pid, ErrorFile: k.errFile, Stderr: tailLines(k.stderr)}
		switch {
		case ws.Signaled():
			w.Status = 128 + int(ws.Signal())
			w.Signal = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
		default:
			w.Status = ws.ExitStatus()
		}
		ended = append(ended, w)
	}
	for i := range ended {
		ended[i].Running = len(known)
	}
	return ended
}

// tailLines is the end of the file at path: its last few non-empty
// lines, " | "-joined ("" without a file).
func tailLines(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		_, _ = f.Seek(fi.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tail))
	var lines []string
	for _, l := range bytes.Split(b, []byte{'\n'}) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			lines = append(lines, string(l))
		}
	}
	lines = lines[max(len(lines)-3, 0):]
	out := strings.Join(lines, " | ")
	if len(out) > 300 {
		out = out[len(out)-300:]
	}
	return out
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// lockedThread runs functions on one OS thread that lives until stop: the
// thread that forks the command must outlive it for its parent-death
// signal (childAttr) to mean "the agent died", since Go may retire
// threads.
type lockedThread struct {
	work chan func()
	done chan struct{}
}

func newLockedThread() *lockedThread {
	t := &lockedThread{work: make(chan func()), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Unlocked, not exited locked: an exiting locked goroutine takes
		// its thread with it, which would fire the signal.
		defer runtime.UnlockOSThread()
		for {
			select {
			case f := <-t.work:
				f()
			case <-t.done:
				return
			}
		}
	}()
	return t
}

// run runs f on the thread and waits for it.
func (t *lockedThread) run(f func()) {
	finished := make(chan struct{})
	t.work <- func() { defer close(finished); f() }
	<-finished
}

func (t *lockedThread) stop() { close(t.done) }
