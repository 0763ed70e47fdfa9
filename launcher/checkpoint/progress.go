package checkpoint

import "context"

// Holding returns the newest entry that has a location at path on host:
// which checkpoint a DROVER_RESUME_FROM path that Stage returned is.
func (r *Record) Holding(host, path string) (Entry, bool) {
	entries := r.Entries()
	for i := len(entries) - 1; i >= 0; i-- {
		for _, l := range entries[i].Held {
			if l.Host == host && l.Path == path {
				return entries[i], true
			}
		}
	}
	return Entry{}, false
}

// Newest lists every host's checkpoint_dir once more (what the watch had
// no time to see: a checkpoint written just before a crash), brings the
// record up to date and returns its newest entry; false when it has
// none. The crash-loop breaker asks it after a failed attempt whether the
// attempt wrote anything newer than what it resumed from.
func (m *Manager) Newest(ctx context.Context, hosts []Host, set Settings) (Entry, bool, error) {
	if err := m.reconcile(ctx, hosts, set); err != nil {
		return Entry{}, false, err
	}
	entries := m.rec.Entries()
	if len(entries) == 0 {
		return Entry{}, false, nil
	}
	return entries[len(entries)-1], true, nil
}
