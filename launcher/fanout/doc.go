// Package fanout runs one thing on many hosts at once and reports each:
// `drover exec` (a command on every host, its output prefixed, the worst
// exit code returned) and `drover probe` (each host's GPUs and, with
// --health, their health, through the agent). A host that cannot be
// reached is a result, not a reason to stop.
package fanout
