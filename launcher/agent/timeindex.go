package agent

// # The time index beside a log
//
// A process's log on its host carries its output unchanged: no timestamp
// is inserted, so that every byte a reader copies is the process's own
// and a stream resumed at a byte offset lands each line exactly once.
// `drover logs --since` still needs to know where the output newer than
// a time starts, so the agent keeps a small index beside each log
// (LOG.times): one text line "START OFFSET END" (Unix nanoseconds, byte
// offset, Unix nanoseconds) per segment of the log, written before the
// segment's first byte. Every byte from OFFSET up to the next line's
// OFFSET was written at a time in [START, END): a write at or after END
// starts a new segment. END is START plus the index's resolution (1 s),
// so a busy process adds one line a second and a quiet one none.
//
// The index stays small: past timeIndexMax lines the agent merges
// neighbouring segments pairwise (keeping the first's START and OFFSET
// and the second's END), doubling the resolution, and rewrites the file
// atomically. A multi-day run's index is a few hundred KiB at most and
// resolves a cut to a minute or so.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// TimeIndexSuffix names a log's time index: worker-3.log.times.
const TimeIndexSuffix = ".times"

// timeIndexRes is the index's first resolution; timeIndexMax the lines it
// keeps before merging.
const (
	timeIndexRes = time.Second
	timeIndexMax = 4096
)

// timeSegment is one line of the index: the log's bytes from Offset on
// (to the next segment's Offset) were written in [Start, End).
type timeSegment struct {
	Start, End time.Time
	Offset     int64
}

// timeIndex is the writer side, owned by the log's lockedWriter.
type timeIndex struct {
	path string
	f    *os.File
	res  time.Duration
	max  int
	segs []timeSegment
	// size is the log's size: the offset the next write starts at.
	size int64
}

// newTimeIndex starts the index of the log at logPath, whose size is size
// now (an appended log keeps its earlier bytes, of unknown times). A
// failure to create it only costs --since its cut.
func newTimeIndex(logPath string, size int64) *timeIndex {
	ix := &timeIndex{path: logPath + TimeIndexSuffix, res: timeIndexRes, max: timeIndexMax, size: size}
	if segs, err := readTimeIndex(ix.path); err == nil {
		ix.segs = segs
	}
	f, err := os.OpenFile(ix.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, privateFile)
	if err == nil {
		ix.f = f
	}
	return ix
}

// before is called before a write at now: it starts a segment when the
// last one's time is up.
func (ix *timeIndex) before(now time.Time) {
	if ix.f == nil {
		return
	}
	if n := len(ix.segs); n > 0 && now.Before(ix.segs[n-1].End) {
		return
	}
	seg := timeSegment{Start: now, End: now.Add(ix.res), Offset: ix.size}
	ix.segs = append(ix.segs, seg)
	if len(ix.segs) > ix.max {
		ix.thin()
		return
	}
	_, _ = ix.f.WriteString(seg.line())
}

// thin merges neighbouring segments pairwise, doubles the resolution and
// rewrites the index (a temporary file renamed over it, so that a reader
// sees the old index or the new one, never half of one).
func (ix *timeIndex) thin() {
	merged := make([]timeSegment, 0, len(ix.segs)/2+1)
	for i := 0; i < len(ix.segs); i += 2 {
		s := ix.segs[i]
		if i+1 < len(ix.segs) {
			s.End = ix.segs[i+1].End
		}
		merged = append(merged, s)
	}
	ix.segs = merged
	ix.res *= 2
	var b strings.Builder
	for _, s := range merged {
		b.WriteString(s.line())
	}
	tmp := ix.path + ".tmp"
	if os.WriteFile(tmp, []byte(b.String()), privateFile) != nil || os.Rename(tmp, ix.path) != nil {
		return
	}
	ix.f.Close()
	ix.f, _ = os.OpenFile(ix.path, os.O_WRONLY|os.O_APPEND, privateFile)
}

func (ix *timeIndex) close() {
	if ix.f != nil {
		ix.f.Close()
	}
}

func (s timeSegment) line() string {
	return fmt.Sprintf("%d %d %d\n", s.Start.UnixNano(), s.Offset, s.End.UnixNano())
}

// readTimeIndex reads an index; a malformed line (the tail of a write the
// agent died in) is skipped.
func readTimeIndex(path string) ([]timeSegment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var segs []timeSegment
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		start, e1 := strconv.ParseInt(f[0], 10, 64)
		off, e2 := strconv.ParseInt(f[1], 10, 64)
		end, e3 := strconv.ParseInt(f[2], 10, 64)
		if errors.Join(e1, e2, e3) != nil || off < 0 {
			continue
		}
		segs = append(segs, timeSegment{Start: time.Unix(0, start), End: time.Unix(0, end), Offset: off})
	}
	return segs, nil
}

// SinceResult is where one log's output newer than a time starts.
type SinceResult struct {
	Log string `json:"log"`
	// Offset is the byte to read from: the start of the line holding the
	// first byte that may be newer than the time. Lines up to the index's
	// resolution older may be included; none newer is left out.
	Offset int64 `json:"offset"`
	// Size is the log's size when it was looked at.
	Size int64 `json:"size"`
	// Indexed is false when the log has no time index (an older agent
	// wrote it): Offset is then 0.
	Indexed bool   `json:"indexed"`
	Error   string `json:"error,omitempty"`
}

// SinceOffset finds where the output of the log at path newer than t
// starts, from its time index.
func SinceOffset(path string, t time.Time) SinceResult {
	res := SinceResult{Log: path}
	// The log's size first: every byte below it was written, and its
	// segment's line in the index too, before the index is read.
	fi, err := os.Stat(path)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Size = fi.Size()
	segs, err := readTimeIndex(path + TimeIndexSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return res
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Indexed = true
	res.Offset = res.Size
	for i, s := range segs {
		if s.End.After(t) {
			// Bytes before the first segment have unknown times: kept.
			if i > 0 {
				res.Offset = min(s.Offset, res.Size)
			} else {
				res.Offset = 0
			}
			break
		}
	}
	if res.Offset > 0 && res.Offset < res.Size {
		res.Offset = lineStart(path, res.Offset)
	}
	return res
}

// lineStart moves off back to the start of its line (within 64 KiB): a
// write may end mid-line, and a cut there would print half a line.
func lineStart(path string, off int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return off
	}
	defer f.Close()
	n := min(off, 64<<10)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off-n); err != nil && !errors.Is(err, io.EOF) {
		return off
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return off - n + int64(i) + 1
	}
	if n == off {
		return 0
	}
	return off
}
