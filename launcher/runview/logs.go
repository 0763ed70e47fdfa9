package runview

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
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
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
	// Since, when set, prints only the output newer than it (see
	// ParseSince): without Attempt or Previous, from the earliest attempt
	// that has some.
	Since Since
	// Notices receives drover's own one-line remarks (nil: dropped).
	Notices io.Writer
}

// Since is a cut in time for `drover logs --since`: Ago back from each
// host's own clock (so that a cut by duration does not depend on this
// machine's), or At.
type Since struct {
	Ago time.Duration
	At  time.Time
}

// Set reports whether s cuts anything.
func (s Since) Set() bool { return s.Ago > 0 || !s.At.IsZero() }

// ParseSince reads --since: a Go duration (10m, 1h30m) back from now, or
// an absolute RFC3339 time (2026-03-12T12:00:00Z).
func ParseSince(text string) (Since, error) {
	if d, err := time.ParseDuration(text); err == nil && d > 0 {
		return Since{Ago: d}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, text); err == nil {
		return Since{At: t}, nil
	}
	return Since{}, fmt.Errorf("--since %q: neither a positive duration (10m, 1h30m) nor an RFC3339 time (2026-03-12T12:00:00Z)", text)
}

// logsPoll is how often --follow reads the hosts' logs.
const logsPoll = 500 * time.Millisecond

// logSource is one process's log on its host and how far it was read.
type logSource struct {
	v      *hostio.View
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
	if lo.Notices != nil {
		lo.Notices = &onceWriter{w: lo.Notices}
	}
	if lo.Since.Set() {
		printSinceHistory(ctx, views, st.RunID, attempt, lo, sink)
	}
	for {
		srcs := logSources(views, st.RunID, attempt, lo, sink)
		if lo.Since.Set() {
			cutSince(ctx, srcs, lo)
			lo.Since = Since{} // a new attempt's logs are printed whole
		}
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
			if hostio.Sleep(ctx, logsPoll) != nil {
				closeSources(srcs)
				return nil
			}
			next, err := summarize(refresh(ctx, views))
			if err == nil && lo.Events != nil && (next.State != lastState || next.Attempt != attempt) {
				fmt.Fprintf(lo.Events, "%s run %s: %s, attempt %d, %d restart(s)\n", time.Now().Format("15:04:05.000"), next.RunID, next.State, next.Attempt, next.Restarts)
				lastState = next.State
			}
			// A foreground run whose drover is gone (lost) is over too:
			// its agents stop its group.
			over := next != nil && (next.State.Final() || next.State == agent.RunLost)
			if err == nil && (next.Attempt != attempt || over) {
				for _, s := range srcs {
					s.copy()
				}
				closeSources(srcs)
				if over && next.Attempt == attempt {
					return nil
				}
				attempt = next.Attempt
				break
			}
		}
	}
}

// printSinceHistory prints, when lo asks for the newest attempt, the
// output newer than lo.Since of the attempts before it: walking back from
// the newest, every attempt that has some (output only grows in time, so
// the first attempt with none ends the walk).
func printSinceHistory(ctx context.Context, views []*hostio.View, id string, newest int, lo LogsOptions, sink *logstream.Sink) {
	if lo.Attempt > 0 || lo.Previous {
		return
	}
	var prior [][]*logSource
	for a := newest - 1; a >= 1; a-- {
		srcs := logSources(views, id, a, lo, sink)
		if !cutSince(ctx, srcs, lo) {
			closeSources(srcs)
			break
		}
		prior = append([][]*logSource{srcs}, prior...)
	}
	for _, srcs := range prior {
		for _, s := range srcs {
			s.copy()
		}
		closeSources(srcs)
	}
}

// cutSince moves each source to where its output newer than lo.Since
// starts, asking each host's agent once (`drover agent since`), and
// reports whether any has such output. A log without a time index (an
// older agent wrote it, or an older agent answers) is printed from its
// start, which one line on lo.Notices says.
func cutSince(ctx context.Context, srcs []*logSource, lo LogsOptions) bool {
	byHost := map[*hostio.View][]*logSource{}
	var hosts []*hostio.View
	for _, s := range srcs {
		if byHost[s.v] == nil {
			hosts = append(hosts, s.v)
		}
		byHost[s.v] = append(byHost[s.v], s)
	}
	newer, unindexed := false, 0
	var reasons []string
	for _, v := range hosts {
		hs := byHost[v]
		res, err := sinceOffsets(ctx, v, hs, lo.Since)
		if err != nil {
			unindexed += len(hs)
			reasons = append(reasons, err.Error())
			newer = true
			continue
		}
		for i, s := range hs {
			// A log that cannot be read (never written) has nothing to
			// print either way.
			if !res[i].Indexed && res[i].Error == "" {
				unindexed++
			}
			s.offset = res[i].Offset
			newer = newer || res[i].Offset < res[i].Size
		}
	}
	if unindexed > 0 && lo.Notices != nil {
		why := "written by an older drover agent"
		if len(reasons) > 0 {
			why = reasons[0]
		}
		fmt.Fprintf(lo.Notices, "drover: --since: %d log(s) have no time index (%s): printing them from the start\n", unindexed, why)
	}
	return newer
}

// sinceOffsets asks v's agent where each of srcs' output newer than since
// starts, one result per source in order.
func sinceOffsets(ctx context.Context, v *hostio.View, srcs []*logSource, since Since) ([]agent.SinceResult, error) {
	files := make([]string, len(srcs))
	for i, s := range srcs {
		files[i] = s.file
	}
	out, said, err := remote.Client{T: v.T, Path: v.AgentPath}.Since(ctx, since.Ago, since.At, files)
	if err != nil {
		return nil, fmt.Errorf("the agent on %s cannot cut by time: %w: %s", hostio.Label(v.Host), err, firstLine(said))
	}
	var res []agent.SinceResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(srcs) {
		return nil, fmt.Errorf("the agent on %s answered `since` with %q, not one result per log", hostio.Label(v.Host), firstLine(string(out)))
	}
	return res, nil
}

// onceWriter passes on its first write only: a remark said once per
// command, however many attempts it concerns.
type onceWriter struct {
	w    io.Writer
	done bool
}

func (o *onceWriter) Write(p []byte) (int, error) {
	if !o.done {
		o.done = true
		return o.w.Write(p)
	}
	return len(p), nil
}

// refresh reads every host's report again.
func refresh(ctx context.Context, views []*hostio.View) []*hostio.View {
	for _, v := range views {
		if v.Err == nil {
			if rep, err := v.Runs(ctx); err == nil {
				v.Report = rep
			}
		}
	}
	return views
}

// logSources are the logs of attempt's processes that lo selects, read
// from each host's state records of that attempt.
func logSources(views []*hostio.View, id string, attempt int, lo LogsOptions, sink *logstream.Sink) []*logSource {
	var out []*logSource
	for _, v := range views {
		if v.Err != nil || (lo.Host != "" && v.Host.Name != lo.Host) {
			continue
		}
		dir := path.Join(v.Workdir, agent.RunDir(id), fmt.Sprintf("attempt-%d", attempt))
		entries, err := v.FS.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := hostio.ReadSmall(v.FS, path.Join(dir, e.Name()), 1<<16)
			var st agent.State
			if err != nil || json.Unmarshal(b, &st) != nil {
				continue
			}
			if len(lo.Ranks) > 0 && !slices.Contains(lo.Ranks, st.Rank) {
				continue
			}
			out = append(out, &logSource{v: v, name: st.Name, file: hostio.ProcessLog(v.Workdir, id, attempt, &st),
				out: logstream.NewPrefixWriter(sink, fmt.Sprintf("[%s@%s] ", st.Name, v.Host.Name))})
		}
	}
	return out
}

// skipToEnd moves s past what its log holds now.
func (s *logSource) skipToEnd() {
	if fi, err := s.v.FS.Stat(s.file); err == nil {
		s.offset = fi.Size()
	}
}

// copy prints what the log gained since the last call.
func (s *logSource) copy() {
	f, err := s.v.FS.Open(s.file)
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

// firstLine is the first line of s, trimmed.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}
