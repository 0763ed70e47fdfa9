// Package container owns what a host needs before a job's processes can
// run in its container image (the job file's container key;
// docs/environments.md), the controller's side of it: the image loaded
// from an archive on the host (docker-archive:PATH: load, then tag it with
// the name the plan's run commands use, plan.ImageRef) or pulled from its
// registry unless the host has it, once per host per run, all hosts at
// once; and, before every attempt, the containers an earlier agent left
// behind in the workdir removed (those carrying plan.LabelWorkdir for it:
// an agent that was SIGKILLed cannot remove its own).
//
// What runs where is decided by Steps alone, a pure function of the job's
// container key and the host's workdir; Prepare runs the steps over
// connections the caller made, and a failure is an *Error naming the host,
// the image and the runtime's own words. The agent's side (a container
// stopped by name with the grace and removed when its agent ends) is in
// package agent.
package container
