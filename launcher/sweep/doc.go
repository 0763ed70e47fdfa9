// Package sweep is `drover sweep`'s decisions, as values and pure
// functions: the parameter grammar (lists, integer ranges, uniform,
// loguniform and choice distributions) and the trials it expands to, the
// substitution of {NAME} in a trial's command, the metrics read from a
// trial's output lines (Katib's stdout collector: NAME=VALUE, step=N),
// the median stopping rule, where a trial runs (Placer over an inventory
// of free GPUs: one host or a group of several, with the sweep's own
// Ledger of the GPUs its trials hold, the GPUs other runs lease and the
// hosts it lost), what follows a trial's run that gave its placement
// back (Policy.Requeue: another run's lease, a lost host), the ranking
// and JSON report of the trials, and the sweep's record on its hosts
// with the decisions of a resume (CheckRecord, SupervisorGone,
// ResumeTrial).
//
// It runs nothing and reads no job file: cmd/drover reads the flags and
// the job file's [sweep] table (cluster/config) and runs each trial as a
// drover run, asking this package what to do at each turn, so that every
// rule has a table test that starts no process.
package sweep
