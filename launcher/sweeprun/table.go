package sweeprun

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/droverhq/drover/launcher/sweep"
)

// redrawEvery is how often a terminal's live table is redrawn.
const redrawEvery = time.Second

// table is the live table: trial, params, state, host:GPUs, metric,
// steps. On a terminal it is redrawn in place every second; elsewhere
// (a pipe, a file, CI) each trial's start and end is one line, so that
// the output reads as a log.
type table struct {
	w      io.Writer
	live   bool
	params []sweep.Param
	mu     sync.Mutex
	lines  int // how many lines the last redraw wrote
}

func newTable(w io.Writer, live bool, params []sweep.Param) *table {
	return &table{w: w, live: live, params: params}
}

// start redraws the table every redrawEvery until the returned stop,
// which draws it a last time.
func (t *table) start(snap func() []sweep.Result) (stop func()) {
	if t.w == nil || !t.live {
		return func() {}
	}
	return every(redrawEvery, func() { t.redraw(snap()) })
}

// every calls f now and every d until the returned stop, which calls it
// a last time once the ticking has ended (the table drawn, the record
// saved, as things stand at the end).
func every(d time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			f()
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		f()
	}
}

// changed says that trial i started or ended: one line when not live.
func (t *table) changed(snap func() []sweep.Result, i int) {
	if t.w == nil || t.live {
		return
	}
	r := snap()[i]
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintln(t.w, strings.Join(row(r, t.params), "  "))
}

// failed says why a trial failed.
func (t *table) failed(id string, err error) {
	if t.w == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live {
		fmt.Fprintf(t.w, "%s failed: %v\n", id, err)
	}
}

// note says what happened to the sweep outside a trial's start and
// end (a trial that waits again, a failed look at the hosts): one line
// when not live; the live table shows the trial pending again.
func (t *table) note(s string) {
	if t.w == nil || t.live {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintln(t.w, s)
}

// redraw writes the whole table over the previous one.
func (t *table) redraw(rs []sweep.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	n := Render(&b, rs, t.params)
	if t.lines > 0 {
		fmt.Fprintf(t.w, "\x1b[%dA\x1b[J", t.lines)
	}
	io.WriteString(t.w, b.String())
	t.lines = n
}

// Render writes rs as a table (a header, then one row per trial) and
// returns the number of lines written: the live table, and at the end
// the trials ranked by the objective.
func Render(w io.Writer, rs []sweep.Result, params []sweep.Param) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRIAL\tPARAMS\tSTATE\tHOST:GPUS\tMETRIC\tSTEPS")
	for _, r := range rs {
		fmt.Fprintln(tw, strings.Join(row(r, params), "\t"))
	}
	tw.Flush()
	return len(rs) + 1
}

// row is a trial's cells.
func row(r sweep.Result, params []sweep.Param) []string {
	var ps []string
	for _, p := range params {
		ps = append(ps, p.Name+"="+r.Params[p.Name])
	}
	where, metric, steps := "-", "-", "-"
	if r.Host != "" {
		where = r.Placement().String()
	}
	if r.Metric != nil {
		metric = fmt.Sprintf("%.6g", *r.Metric)
		steps = fmt.Sprint(r.Steps)
	}
	return []string{r.ID, strings.Join(ps, " "), string(r.State), where, metric, steps}
}
