// Package slurm holds the end-to-end tests of examples/pytorch-ddp on a real
// Slurm cluster (internal/fleettest/slurmtest): the job file of a hand-run fleet,
// handed to drover submit, trained, disturbed, requeued and cancelled.
package slurm
