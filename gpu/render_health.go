package gpu

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// RenderHealth writes `drover probe --health`'s table: every health
// counter of every GPU ("-" where the GPU does not report it), then per
// host where its Xids were read from, each Xid, and its findings.
func RenderHealth(w io.Writer, results []HostResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tGPU\tECC VOLATILE\tECC AGGREGATE\tRETIRED PENDING\tREMAP PENDING\tREMAP FAILED\tTHROTTLE\tPCIE")
	for _, r := range results {
		for _, d := range r.Report.Devices {
			h := Health{}
			if d.Health != nil {
				h = *d.Health
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Report.Host, d.Index, cellUint(h.ECCVolatile, false),
				cellUint(h.ECCAggregate, false), cellBool(h.RetiredPending), cellBool(h.RemapPending), cellBool(h.RemapFailure),
				cellUint(h.Throttle, true), cellPCIe(h))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("render health table: %w", err)
	}
	var b strings.Builder
	for _, r := range results {
		src := r.Report.XIDSource
		if src == "" {
			src = "not read: " + r.Report.XIDReason
		}
		fmt.Fprintf(&b, "%s: %d Xid(s) (%s)\n", r.Report.Host, len(r.Report.XIDs), src)
		for _, x := range r.Report.XIDs {
			g := fmt.Sprintf("GPU %d", x.GPU)
			if x.GPU < 0 {
				g = "GPU " + x.PCI
			}
			fmt.Fprintf(&b, "  Xid %d on %s: %s\n", x.Code, g, x.Text)
		}
		for _, f := range r.Findings {
			kind := "warning"
			if f.Critical {
				kind = "critical"
			}
			fmt.Fprintf(&b, "  %s: %s %s: %s (fix: %s)\n", kind, f.Host, f.GPU, f.What, f.Fix)
		}
	}
	if _, err := io.WriteString(w, "\n"+b.String()); err != nil {
		return fmt.Errorf("render health table: %w", err)
	}
	return nil
}

func cellUint(v *uint64, hex bool) string {
	switch {
	case v == nil:
		return "-"
	case hex:
		return fmt.Sprintf("0x%x", *v)
	}
	return strconv.FormatUint(*v, 10)
}

func cellBool(v *bool) string {
	switch {
	case v == nil:
		return "-"
	case *v:
		return "yes"
	}
	return "no"
}

// cellPCIe is "gen 5/5 x16/16".
func cellPCIe(h Health) string {
	i := func(v *int) string {
		if v == nil {
			return "?"
		}
		return strconv.Itoa(*v)
	}
	if h.PCIeGen == nil && h.PCIeWidth == nil {
		return "-"
	}
	return fmt.Sprintf("gen %s/%s x%s/%s", i(h.PCIeGen), i(h.PCIeGenMax), i(h.PCIeWidth), i(h.PCIeWidthMax))
}
