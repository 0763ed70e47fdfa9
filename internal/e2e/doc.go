// Package e2e holds drover's end-to-end fleet scenarios of a run itself:
// tests that build the real drover binary and run it against a fleet of
// real SSH hosts (internal/fleettest) as a user would (start, Ctrl-C,
// kill -9, restarts, workdir leases, recovery onto a spare, hostile
// hosts, checknet, push, exec), checking what the binary prints, how it
// exits and what is left on the hosts. They live here rather than beside
// cmd/drover, whose tests check the CLI's wiring (usage, flags, exit
// codes, config errors, the agent build) in-process, so that a scenario
// sees drover only from the outside.
//
// The other scenarios are in sub-packages, one fleet each, so that CI
// runs them side by side: longrun (detached runs, adoption, logs),
// sharing (GPU leases, the queue, sweeps, setup, containers) and watch
// (health, stacks and the hang verdict, stragglers, top, notifications,
// shrinking on a lost host); internal/e2e/kit is what they share. It has
// no code outside tests.
package e2e
