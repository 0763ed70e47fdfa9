package main

import (
	"context"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/stage"
)

// The transfer section's data staging cases (issue 38): a [[data]] set
// of 1,000 files on h0 (the shards entries, 200 MiB and 2 GiB) staged by
// launcher/stage, the code `drover stage` and `drover run` use, onto 1,
// 2, 4 and 8 hosts with every host's link at -transfer-link, from the
// controller 50 Mbit/s away; then staged again with nothing changed.

// dataTargets are the numbers of hosts a data set is staged onto.
var dataTargets = []int{1, 2, 4, 8}

// dataCases are the data staging cases of entry (one with 1,000 files).
func dataCases(entry, link string) []transferCase {
	var out []transferCase
	for _, n := range dataTargets {
		out = append(out, transferCase{Kind: "data", Entry: entry, Targets: n, Link: link})
	}
	return out
}

// dataCase stages case i's data set onto its targets into a destination
// of its own (under own-<i>, which cleanOwn removes), and stages it again
// with nothing changed: it returns the first staging's seconds and sets
// *again to the second's.
func dataCase(ctx context.Context, hs []txHost, spec transferSpec, i int, c transferCase, again *float64, stderr io.Writer) (first float64, err error) {
	hosts := make([]stage.Host, c.Targets+1)
	for k, h := range hs[:c.Targets+1] {
		own := path.Join(h.home, "tx", fmt.Sprintf("own-%d", i))
		hosts[k] = stage.Host{Name: spec.Hosts[k].Name, T: h.t, FS: h.fs, Home: h.home, Workdir: own,
			Addr: spec.Hosts[k].Address, Peer: remote.Client{T: h.t, Path: spec.Agent}}
	}
	sets := []config.DataSet{{Name: "bench", SourceHost: hosts[0].Name,
		Source: path.Join(hs[0].home, "tx", "ck-"+c.Entry, c.Entry), Dest: "data"}}
	o := stage.Options{Events: func(format string, args ...any) { fmt.Fprintf(stderr, "    "+format+"\n", args...) }}
	start := time.Now()
	res, err := stage.Stage(ctx, sets, hosts[1:], hosts[:1], o)
	first = time.Since(start).Seconds()
	if err != nil {
		return first, err
	}
	for _, r := range res {
		if r.Unchanged != 0 {
			return first, fmt.Errorf("%s already had %d files", r.Host, r.Unchanged)
		}
	}
	start = time.Now()
	res, err = stage.Stage(ctx, sets, hosts[1:], hosts[:1], o)
	*again = time.Since(start).Seconds()
	for _, r := range res {
		if err == nil && r.Files != 0 {
			err = fmt.Errorf("staging again sent %d files to %s", r.Files, r.Host)
		}
	}
	return first, err
}

// dataRows are a data staging case's rows: its time (onto N against
// onto 1, at most 1.5 times as long) and the second staging's (under
// 3 s).
func dataRows(r transferResult, find func(transferCase) (transferResult, bool)) []Row {
	c := r.Case
	row := Row{Section: "transfer", N: c.Targets + 1, What: c.String(), Drover: measureOf(r)}
	if c.Targets > 1 {
		one := c
		one.Targets = 1
		base, _ := find(one)
		row.Baseline, row.BaselineTime, row.Target = "onto 1 host", measureOf(base), Target{MinSpeedup: 1 / 1.5}
	}
	rows := []Row{row}
	if r.Err == "" {
		rows = append(rows, Row{Section: "transfer", N: c.Targets + 1, What: c.String() + ": again, nothing changed",
			Drover: Measure{Value: r.Again, Unit: Seconds, N: 1}, Target: Target{Max: 3}})
	}
	return rows
}
