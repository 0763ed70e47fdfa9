// Package stacktrace reads Python stacks as faulthandler and py-spy print
// them and judges a hung group by them: which ranks wait in a collective
// (all_reduce, broadcast, barrier, a c10d store's wait, ...) and which are
// elsewhere, with the innermost frame of their own code. It is pure: the
// stacks come from `drover agent stacks` (package agent), and the verdict
// goes into drover run's hang event and `drover stacks`' output.
package stacktrace
