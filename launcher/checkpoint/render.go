package checkpoint

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Render writes the record as `drover checkpoints` shows it: each
// checkpoint, oldest first, with its size, when drover saw it complete
// (in loc) and where it is held, as of drover's last look (the start of an
// attempt, a copy, or Current's look at the hosts). Names are a host's:
// their control characters are escaped.
func Render(w io.Writer, entries []Entry, loc *time.Location) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no checkpoints recorded yet (drover records them while `drover run` runs)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tCHECKPOINT\tSIZE\tSEEN COMPLETE\tHELD BY")
	for _, e := range entries {
		var held []string
		for _, l := range e.Held {
			switch l.Kind {
			case Mirror:
				held = append(held, "mirror")
			case Copy:
				if l.Part != "" {
					held = append(held, fmt.Sprintf("%s (copy of %s's part)", l.Host, l.Part))
					continue
				}
				held = append(held, fmt.Sprintf("%s (%s)", l.Host, l.Kind))
			default:
				held = append(held, fmt.Sprintf("%s (%s)", l.Host, l.Kind))
			}
		}
		where := strings.Join(held, ", ")
		if where == "" {
			where = "nowhere any more"
		}
		if len(e.Parts) > 0 {
			where += "; " + partsStatus(e)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, cluster.Escape(e.Name), human(e.Size), e.Seen.In(loc).Format("2006-01-02 15:04:05"), where)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "newest last; \"written\" is the training's own file, \"copy\" drover's copy under the workdir's .drover/checkpoints")
	return err
}

// Current is the record's entries as the hosts hold them now, for `drover
// checkpoints`: every host given is listed again and its holdings checked
// as a run's staging checks them (a checkpoint the script deleted is held
// there no more, one drover never saw is added, a damaged copy of
// drover's is dropped), so that what the listing says is true as of now,
// not as of the run's last look. Hosts not given (unreachable) keep what
// the record says. The record file is left alone (a running supervisor
// owns it); what was checked is in the entries returned. warn gets what
// a host's listing could not read.
func Current(ctx context.Context, rec *Record, hosts []Host, set Settings, warn func(format string, args ...any)) ([]Entry, error) {
	c := rec.scratch()
	if warn == nil {
		warn = func(string, ...any) {}
	}
	if err := New(c, warn, nil).reconcile(ctx, hosts, set); err != nil {
		return nil, err
	}
	return c.Entries(), nil
}

// Restorable reports whether a run could resume from e: some place holds
// it, and, for a sharded checkpoint, every part.
func Restorable(e Entry) bool {
	if len(e.Held) == 0 {
		return false
	}
	for _, p := range e.Parts {
		if !slices.ContainsFunc(e.Held, func(l Location) bool {
			return (l.Kind == Written && l.Host == p) || (l.Kind == Copy && l.Part == p)
		}) {
			return false
		}
	}
	return true
}

// RestorableWithout reports whether a run could resume from e without
// anything on host: Restorable with host's places left out (the mirror
// stays). A straggler's host is set aside before the restart that
// replaces it (docs/health.md#replacing-a-straggler-on_straggler--replace),
// and staging reads only from the new group's hosts and the mirror, so a
// checkpoint held only there is not one to restart from.
func RestorableWithout(e Entry, host string) bool {
	e.Held = slices.DeleteFunc(slices.Clone(e.Held), func(l Location) bool { return l.Kind != Mirror && l.Host == host })
	return Restorable(e)
}

// NewestWithout is the newest entry of entries (oldest first, as
// Record.Entries returns them) that RestorableWithout host; false for
// none.
func NewestWithout(entries []Entry, host string) (Entry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if RestorableWithout(entries[i], host) {
			return entries[i], true
		}
	}
	return Entry{}, false
}

// RenderListing is `drover checkpoints`: the restorable entries (every
// entry ever recorded with all) as Render shows them, then how many more
// the record remembers that no place holds any more.
func RenderListing(w io.Writer, entries []Entry, all bool, loc *time.Location) error {
	shown := entries
	if !all {
		shown = slices.DeleteFunc(slices.Clone(entries), func(e Entry) bool { return !Restorable(e) })
	}
	if len(shown) == 0 && len(entries) > 0 {
		_, err := fmt.Fprintf(w, "no restorable checkpoint: the %d recorded are held nowhere any more (--all lists them)\n", len(entries))
		return err
	}
	if err := Render(w, shown, loc); err != nil {
		return err
	}
	if n := len(entries) - len(shown); n > 0 {
		_, err := fmt.Fprintf(w, "%d more recorded checkpoint(s) can no longer be restored (--all lists them)\n", n)
		return err
	}
	return nil
}
