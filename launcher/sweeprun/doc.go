// Package sweeprun runs `drover sweep`: the trials of a sweep (package
// sweep's decisions) in parallel on the fleet's free GPUs, each as one
// drover run, with their metrics read from their output, the median rule
// stopping the poor ones early, a live table, and the report at the end.
// A trial whose run gives its placement back (a *sweep.SetbackError:
// another run leased its GPUs, or its host was lost) is pending again,
// and the runner looks at the hosts' leases again (Sweep.Refresh) while
// trials wait on them. The sweep's record on the job's hosts (Store,
// state.go) is where `drover sweep status|stop|logs` read it and from
// which a sweep whose supervisor died is resumed (Sweep.Resumed: kept
// trials are not run again, adopted ones are followed on their recorded
// GPUs).
//
// It does not start runs itself: the launcher core is imported by
// cmd/drover alone, so cmd/drover hands Sweep a RunTrial that calls
// launcher.Run with TrialConfig as its Adjust, which turns the job into
// one trial of it (its hosts and pinned GPUs, its own workdir, command
// and environment), and turns the run's typed errors into setbacks.
// SeedCommand is how a trial's directory is filled on a host from the
// code the sweep pushed there once (CodeDir). Tests hand it a stand-in
// trainer.
package sweeprun
