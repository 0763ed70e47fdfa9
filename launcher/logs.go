package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/logstream"
)

// LogsOptions select what `drover logs` prints of a detached run.
type LogsOptions struct {
	// Ranks and Host filter the processes (none: all).
	Ranks []int
	Host  string
	// Attempt is the attempt to print (0: the newest); Previous the one
	// before the newest.
	Attempt  int
	Previous bool
	// Follow keeps printing what the processes write, across restarts,
	// until ctx ends or the run has ended.
	Follow bool
	// FromEnd skips what the logs hold already (drover attach).
	FromEnd bool
	// Events, when set, receives a line at each change of the run's
	// state or attempt while following.
	Events io.Writer
}

// logsPoll is how often --follow reads the hosts' logs.
const logsPoll = 500 * time.Millisecond

// logSource is one process's log on its host and how far it was read.
type logSource struct {
	v      *hostView
	name   string
	file   string
	offset int64
	out    io.WriteCloser
}

// Logs prints the logs of the job's newest detached run from the hosts'
// own files, each line prefixed as the live stream is ([worker-3@h2]):
// it needs neither the local runs/ nor a live supervisor.
func Logs(ctx context.Context, o InspectOptions, lo LogsOptions, w io.Writer) error {
	_, views, closeAll, err := inspect(ctx, o, true)
	if err != nil {
		return err
	}
	defer closeAll()
	st, err := summarize(views)
	if err != nil {
		return err
	}
	attempt := st.Attempt
	switch {
	case lo.Attempt > 0:
		attempt = lo.Attempt
	case lo.Previous:
		attempt = st.Attempt - 1
	}
	if attempt < 1 {
		return fmt.Errorf("run %s has no attempt %d", st.RunID, attempt)
	}
	sink := logstream.NewSink(w)
	lastState := st.State
	for {
		srcs := logSources(views, st.RunID, attempt, lo, sink)
		if lo.FromEnd {
			for _, s := range srcs {
				s.skipToEnd()
			}
			lo.FromEnd = false // a new attempt's logs are printed whole
		}
		for {
			for _, s := range srcs {
				s.copy()
			}
			if !lo.Follow {
				closeSources(srcs)
				return nil
			}
			if sleepCtx(ctx, logsPoll) != nil {
				closeSources(srcs)
				return nil
			}
			next, err := summarize(refresh(ctx, views))
			if err == nil && lo.Events != nil && (next.State != lastState || next.Attempt != attempt) {
				fmt.Fprintf(lo.Events, "%s run %s: %s, attempt %d, %d restart(s)\n", time.Now().Format("15:04:05.000"), next.RunID, next.State, next.Attempt, next.Restarts)
				lastState = next.State
			}
			if err == nil && (next.Attempt != attempt || isFinal(next.State)) {
				for _, s := range srcs {
					s.copy()
				}
				closeSources(srcs)
				if isFinal(next.State) && next.Attempt == attempt {
					return nil
				}
				attempt = next.Attempt
				break
			}
		}
	}
}

// refresh reads every host's report again.
func refresh(ctx context.Context, views []*hostView) []*hostView {
	for _, v := range views {
		if v.err == nil {
			if rep, err := v.runs(ctx); err == nil {
				v.rep = rep
			}
		}
	}
	return views
}

// logSources are the logs of attempt's processes that lo selects, read
// from each host's state records of that attempt.
func logSources(views []*hostView, id string, attempt int, lo LogsOptions, sink *logstream.Sink) []*logSource {
	var out []*logSource
	for _, v := range views {
		if v.err != nil || (lo.Host != "" && v.host.Name != lo.Host) {
			continue
		}
		dir := path.Join(v.wd, agent.RunDir(id), fmt.Sprintf("attempt-%d", attempt))
		entries, err := v.fs.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := readSmall(v.fs, path.Join(dir, e.Name()), 1<<16)
			var st agent.State
			if err != nil || json.Unmarshal(b, &st) != nil {
				continue
			}
			if len(lo.Ranks) > 0 && !slices.Contains(lo.Ranks, st.Rank) {
				continue
			}
			_, log := agent.ProcessFiles(id, attempt, st.Name)
			out = append(out, &logSource{v: v, name: st.Name, file: path.Join(v.wd, log),
				out: logstream.NewPrefixWriter(sink, fmt.Sprintf("[%s@%s] ", st.Name, v.host.Name))})
		}
	}
	return out
}

// skipToEnd moves s past what its log holds now.
func (s *logSource) skipToEnd() {
	if fi, err := s.v.fs.Stat(s.file); err == nil {
		s.offset = fi.Size()
	}
}

// copy prints what the log gained since the last call.
func (s *logSource) copy() {
	f, err := s.v.fs.Open(s.file)
	if err != nil {
		return
	}
	defer f.Close()
	if sk, ok := f.(io.Seeker); ok {
		if _, err := sk.Seek(s.offset, io.SeekStart); err != nil {
			return
		}
	} else if _, err := io.CopyN(io.Discard, f, s.offset); err != nil {
		return
	}
	n, _ := io.Copy(s.out, f)
	s.offset += n
}

func closeSources(srcs []*logSource) {
	for _, s := range srcs {
		s.out.Close()
	}
}
