// Package launcher runs a plan on the fleet and keeps it running.
//
// Run is the supervisor of `drover run`: each attempt connects to the
// hosts, probes their GPUs, builds the plan (package plan), pushes the
// code, starts every process under the on-host agent and watches the group;
// when one process dies, it stops them all and starts the next attempt from
// the newest checkpoint, re-reading the inventory first. Exec is the
// fan-out of `drover exec`: one command on every host at once.
//
// What each process gets (host, ranks, environment, argv) is decided by
// package plan alone; launcher only carries it out.
package launcher
