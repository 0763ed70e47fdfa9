// Package cause names why an attempt of a group failed: which process's
// end is the root cause, which come after it as its victims ("then:"),
// and when the group must stop for it.
//
// Ends reach drover in the order their reports arrive, not the order
// they happened: a rank that finished early (a DDP desync) or was killed
// by the OOM killer may be heard of after the peers that failed because
// of it. The rules that put them back in order (the attempt's first
// event, an early finish named after earlyFinishWait, a failure that
// reads as a lost peer held for up to PeerLostSettle, and on a run's
// first attempt a failure at start held for up to StartSettle so that the
// other ranks fail on their own) are one type,
// Tracker, kept apart from the supervisor that runs the processes so
// that every race can be replayed in a table test: it is fed events with
// their times, and answers what to print, which causes to record, whether
// the group must stop now and with which reason, and when it next wants
// a tick. It has no goroutines, channels or clock of its own; the
// launcher's supervisor reads the causes (error files, stderr), feeds
// the events and acts on the answers.
package cause
