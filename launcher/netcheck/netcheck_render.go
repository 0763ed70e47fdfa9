package netcheck

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// shortRate is a rate for a matrix cell: "9.41G", "50.1M".
func shortRate(bps float64) string {
	for _, u := range []struct {
		s string
		m float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if bps >= u.m {
			return strconv.FormatFloat(bps/u.m, 'g', 3, 64) + u.s
		}
	}
	return strconv.FormatFloat(bps, 'f', 0, 64)
}

// Render writes a network check as people read it: the matrix of
// rates in bits per second (a row sends to its columns), each host's
// rates and round trip, the failed links, and the slowest host.
func Render(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	names := make([]string, len(rep.Hosts))
	for i, h := range rep.Hosts {
		names[i] = h.Name
	}
	fmt.Fprintf(tw, "bit/s, from \\ to\t%s\t\n", strings.Join(names, "\t"))
	cell := map[[2]string]string{}
	for _, l := range rep.Links {
		v := shortRate(l.BitsPerSec)
		if l.Err != "" {
			v = "failed"
		}
		cell[[2]string{l.From, l.To}] = v
	}
	for _, from := range names {
		row := []string{from}
		for _, to := range names {
			v, ok := cell[[2]string{from, to}]
			if !ok {
				v = "-"
			}
			row = append(row, v)
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, h := range rep.Hosts {
		if h.Err != "" {
			fmt.Fprintf(w, "%s: not measured: %s\n", h.Name, cluster.Escape(h.Err))
			continue
		}
		ifc := h.Iface
		if ifc == "" {
			ifc = "its address"
		}
		fmt.Fprintf(w, "%s (%s): %s (out %s, in %s), round trip %.0f us\n", h.Name, cluster.Escape(ifc),
			config.FormatBandwidth(h.Rate), config.FormatBandwidth(h.Out), config.FormatBandwidth(h.In), h.RTTMicros)
	}
	for _, l := range rep.Links {
		if l.Err != "" {
			fmt.Fprintf(w, "link %s to %s failed: %s\n", l.From, l.To, cluster.Escape(l.Err))
		}
	}
	if rep.Slowest != "" {
		h := rep.HostNamed(rep.Slowest)
		_, err := fmt.Fprintf(w, "slowest: %s at %s\n", h.Name, config.FormatBandwidth(h.Rate))
		return err
	}
	return nil
}
