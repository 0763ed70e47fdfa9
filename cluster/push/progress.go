package push

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Phase is where a host's push stands.
type Phase string

// The phases of one Sync, in order.
const (
	PhaseCompare Phase = "compare" // reading the manifest or stat-ing files
	PhaseUpload  Phase = "upload"  // sending changed files to temporary names
	PhaseCommit  Phase = "commit"  // moving them into place
	PhaseDone    Phase = "done"
	PhaseFailed  Phase = "failed" // Sync returned an error
)

// Progress is a snapshot of one host's push, passed to Options.Progress.
type Progress struct {
	Host  string
	Phase Phase
	// FilesDone of FilesTotal changed files have been uploaded.
	FilesDone, FilesTotal int
	// BytesDone of BytesTotal bytes of changed content have been sent.
	BytesDone, BytesTotal int64
}

// redrawEvery limits terminal redraws to about five a second: enough to
// look live, little enough not to cost anything next to the transfer.
const redrawEvery = 200 * time.Millisecond

// maxHostLines bounds the per-host lines drawn under the total, so a fleet
// of hundreds does not scroll the terminal.
const maxHostLines = 8

// Display draws the progress of concurrent Syncs as a block of lines that is
// redrawn in place. It is meant for stderr and does nothing unless that is
// a terminal, so logs and pipes stay clean. Update is safe for concurrent
// use and is what Options.Progress should call.
type Display struct {
	w       io.Writer
	enabled bool
	now     func() time.Time

	mu    sync.Mutex
	hosts map[string]Progress
	start time.Time
	last  time.Time
	lines int // lines currently drawn
}

// NewDisplay returns a Display drawing on w when w is a terminal (an
// *os.File for which term.IsTerminal holds), and a silent one otherwise.
func NewDisplay(w io.Writer) *Display {
	f, ok := w.(*os.File)
	return newDisplay(w, ok && f != nil && term.IsTerminal(int(f.Fd())), time.Now)
}

func newDisplay(w io.Writer, enabled bool, now func() time.Time) *Display {
	return &Display{w: w, enabled: enabled, now: now, hosts: map[string]Progress{}, start: now()}
}

// Update records p and redraws if the last redraw is old enough.
func (d *Display) Update(p Progress) {
	if !d.enabled {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts[p.Host] = p
	if now := d.now(); now.Sub(d.last) >= redrawEvery {
		d.last = now
		d.draw()
	}
}

// Close erases the block, so that the summary lines printed next replace it.
func (d *Display) Close() {
	if !d.enabled {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lines > 0 {
		fmt.Fprintf(d.w, "\x1b[%dA\r\x1b[J", d.lines)
		d.lines = 0
	}
}

func (d *Display) draw() {
	snap := make([]Progress, 0, len(d.hosts))
	for _, p := range d.hosts {
		snap = append(snap, p)
	}
	lines := renderProgress(snap, d.now().Sub(d.start))
	var b strings.Builder
	if d.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", d.lines)
	}
	for _, l := range lines {
		b.WriteString("\r\x1b[K")
		b.WriteString(l)
		b.WriteString("\n")
	}
	if len(lines) < d.lines {
		b.WriteString("\x1b[J")
	}
	d.lines = len(lines)
	io.WriteString(d.w, b.String())
}

// renderProgress lays out the block: a total line, then one line per host
// still working (busiest first, at most maxHostLines).
func renderProgress(hosts []Progress, elapsed time.Duration) []string {
	var (
		files, filesTotal int
		bytes, bytesTotal int64
		done, failed      int
		active            []Progress
	)
	for _, p := range hosts {
		files += p.FilesDone
		filesTotal += p.FilesTotal
		bytes += p.BytesDone
		bytesTotal += p.BytesTotal
		switch p.Phase {
		case PhaseDone:
			done++
		case PhaseFailed:
			failed++
		default:
			active = append(active, p)
		}
	}
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(bytes) / s
	}
	head := fmt.Sprintf("push: %d/%d hosts done", done, len(hosts))
	if failed > 0 {
		head += fmt.Sprintf(", %d failed", failed)
	}
	lines := []string{fmt.Sprintf("%s, %d/%d files, %s/%s, %s/s",
		head, files, filesTotal, FormatBytes(bytes), FormatBytes(bytesTotal), FormatBytes(int64(rate)))}
	sort.Slice(active, func(i, j int) bool {
		ri, rj := active[i].BytesTotal-active[i].BytesDone, active[j].BytesTotal-active[j].BytesDone
		if ri != rj {
			return ri > rj
		}
		return active[i].Host < active[j].Host
	})
	width := 0
	for i, p := range active {
		if i < maxHostLines {
			width = max(width, len(p.Host))
		}
	}
	for i, p := range active {
		if i == maxHostLines {
			lines = append(lines, fmt.Sprintf("  ... and %d more", len(active)-maxHostLines))
			break
		}
		lines = append(lines, fmt.Sprintf("  %-*s  %-7s %d/%d files, %s/%s",
			width, p.Host, p.Phase, p.FilesDone, p.FilesTotal, FormatBytes(p.BytesDone), FormatBytes(p.BytesTotal)))
	}
	return lines
}

// FormatBytes renders n in decimal units with one decimal ("1.2 MB"), as
// push's summary lines and progress show sizes.
func FormatBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
