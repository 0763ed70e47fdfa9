// Package container is the controller's side of a job's container image
// (the job file's container key; docs/environments.md): before an attempt,
// each host's containers left behind removed and, once per host per run,
// the image loaded or pulled, all hosts at once.
//
// The image is loaded from an archive already on the host
// (docker-archive:PATH: load, then tagged with the name the plan's run
// commands use, plan.ImageRef), or pulled from its registry unless the
// host has it. The containers removed before every attempt are those that
// carry plan.LabelWorkdir for the job's workdir: an agent killed outright
// cannot remove its own, and the workdir's lease says no other run of
// drover uses them.
//
// What runs where is decided by Steps alone, a pure function of the job's
// container key, the host's workdir and whether the image is due; Prepare
// runs the steps over connections the caller made, and a failure is an
// *Error naming the host, the image and the runtime's own words. The
// agent's side (a container stopped by name with the grace, and removed
// whenever its agent ends) is in package agent.
package container
