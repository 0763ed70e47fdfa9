// Package slurm runs drover's jobs inside a Slurm allocation: it turns the
// allocation (SLURM_JOB_NODELIST, the GPUs per node, SLURM_RESTART_COUNT)
// into the hosts a job runs on, provides the transport that starts
// processes as job steps with srun instead of over SSH (with file access
// through the shared filesystem, or through a step on a node that does not
// share it), keeps the restart count that continues across a requeue, and
// writes the sbatch script with which `drover submit` asks Slurm for an
// allocation.
//
// It builds on packages cluster (the Transport seam) and cluster/config
// (hosts, the job's [slurm] table) and knows nothing of plans: the plan of
// an allocation is the plan of the same hosts given as an inventory.
package slurm
