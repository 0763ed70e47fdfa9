// Package netcheck measures the links between a job's hosts (`drover
// check net`): a listener on every host (`drover agent net-listen`) and,
// round by round, a sender toward each other host (`net-send`), over the
// interface the job's collectives use. The run's preflight = ["net"]
// (package launcher) measures its own connections with Measure and swaps
// slow hosts for spares; the rendering and the minimum-bandwidth rule are
// here so that both say the same.
package netcheck
