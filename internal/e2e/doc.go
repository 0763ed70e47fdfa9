// Package e2e holds drover's end-to-end fleet scenarios: tests that build
// the real drover binary and run it against a fleet of real SSH hosts
// (internal/fleettest) as a user would (run, detach, adopt, leases,
// recovery, health, logs, top, checknet, push, exec), checking what the
// binary prints, how it exits and what is left on the hosts. They live
// here rather than beside cmd/drover, whose tests check the CLI's wiring
// (usage, flags, exit codes, config errors, the agent build) in-process,
// so that a scenario sees drover only from the outside and the fleet they
// share comes up once for this package. It has no code outside tests.
package e2e
