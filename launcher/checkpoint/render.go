package checkpoint

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Render writes the record as `drover checkpoints` shows it: each
// checkpoint, oldest first, with its size, when drover saw it complete
// (in loc) and where it is held, as of drover's last look (the start of an
// attempt, or a copy). Names are a host's: their control characters are
// escaped.
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
