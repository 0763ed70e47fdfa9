// Package nccldiag asks NCCL and PyTorch what they know of a hung group,
// beyond the Python stacks (package stacktrace): NCCL's RAS service
// (2.24+), through its plain-text client protocol on the port the plan
// gives the job (NCCL_RAS_ADDR), without NVIDIA's ncclras binary (Query,
// with Short for an event's line), and PyTorch's flight recorder, whose
// per-rank dump files it copies into the run's directory (Gather). Every
// answer comes from a host drover does not trust: each read is bounded in
// time and size, control characters are dropped, and a file's name on the
// controller is the one drover chose, never one a host gave.
//
// It is a leaf: the agent runs Query on rank 0's host (`drover agent
// stacks --ras`), and drover run gathers the dump files over the hosts'
// file access it already holds.
package nccldiag
