// Package gpulease keeps two drover runs off one GPU: per-GPU leases and
// the queue of runs waiting for GPUs, kept on each host in one directory
// that every user of the host shares (Dir, a sticky, world-writable
// directory, as /tmp is).
//
// A lease is a file named for the GPU and the user who holds it
// (<gpu>.<uid>.lease), created whole (written under a temporary name, then
// linked into place, so that it never exists half written) and flock(2)ed
// (shared) by the processes that hold it for as long as they hold it: the
// gpu-lease agent that took it, and the agents of the group that uses the
// GPU (Join), so that the lease lives as long as the group does. Whether
// a holder is alive is therefore not guessed: the kernel drops a lock when
// its holder exits or is SIGKILLed, and any user can test for one (an
// exclusive lock is granted only when no holder is left) on a read-only
// descriptor. The sticky bit keeps other non-root users from
// removing or replacing a user's lease; a user's own dead lease is
// reclaimed by that user's next take, another user's dead lease is
// ignored. Files are opened with O_NOFOLLOW and created with O_EXCL (or
// link(2), which fails on any existing name): a link planted in the
// directory is never followed.
//
// The queue is files of the same kind (q.<since>.<run id>.<uid>), one per
// waiting run, locked by the process that waits: a waiter whose process
// is gone loses its place. Order is the controller's time of entry, then
// the run id: the same on every host, so that runs waiting for several
// hosts never wait for each other.
//
// The decisions (which GPUs a take gets, a waiter's place, how a holder is
// named) are pure functions (Choose, Position, Holder.String) with table
// tests; the file operations around them (Take, Release, List, Enqueue)
// are thin.
package gpulease
