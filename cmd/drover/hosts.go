//go:build !droveragent

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// pickHosts returns the hosts named in list (the --hosts flag,
// comma-separated) in inventory order, or, when list is empty, every host:
// spares included only with withSpares, since a spare takes part in a job
// only once it replaces a host. An unknown name is an error that lists the
// known ones.
func pickHosts(all []config.Host, list string, withSpares bool) ([]config.Host, error) {
	if strings.TrimSpace(list) == "" {
		var out []config.Host
		for _, h := range all {
			if withSpares || !h.Spare {
				out = append(out, h)
			}
		}
		return out, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []config.Host
	for _, h := range all {
		if want[h.Name] {
			out = append(out, h)
			delete(want, h.Name)
		}
	}
	if len(want) > 0 {
		var missing, names []string
		for n := range want {
			missing = append(missing, n)
		}
		slices.Sort(missing)
		for _, h := range all {
			names = append(names, h.Name)
		}
		return nil, fmt.Errorf("--hosts: no host named %s in the inventory (hosts: %s)",
			strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	return out, nil
}
