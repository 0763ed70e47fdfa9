// Package checkpoint owns drover's view of a job's checkpoints: which
// entries in checkpoint_dir are complete, the order in which drover saw
// them complete (the record), copies of them on other hosts and on the
// controller's disk, and which one every process resumes from.
//
// Training code writes checkpoints into checkpoint_dir on its own host,
// and there may be no shared filesystem: a host lost for good takes its
// checkpoints with it. So while an attempt runs, a Watcher polls every
// host's checkpoint_dir over drover's existing connections and, when a new
// entry becomes complete, streams it to other hosts until
// checkpoint_copies hosts hold it (host to host between drover's agents
// where they can reach each other, see direct.go; host -> controller ->
// host where they cannot), and onto the controller's checkpoint_mirror
// directory when one is set. With the sharded layout (sharded.go), one
// checkpoint is every host's same-named directory, each a part. A newer
// checkpoint cancels a copy still in flight. Before each attempt, Stage
// picks the newest checkpoint that still exists anywhere and puts it on
// every host of the new group that lacks it, so that DROVER_RESUME_FROM
// names a path on each process's own host.
//
// Rules that callers and users rely on:
//
//   - "Newest" is the order in the record (Record), which is the order in
//     which drover saw entries complete, on the controller's clock.
//     Modification times are compared only between entries of one host, and
//     only for entries drover finds already there when it has no record of
//     them.
//   - drover's copies live in <workdir>/.drover/checkpoints/<seq>/<name> on
//     hosts and <mirror>/<seq>/<name> on the controller, each with a
//     MANIFEST (sizes and sha256 of every file) that says the copy is whole
//     and lets a host that already holds the same content be skipped. A
//     copy is fsynced before it is renamed into place, and checked against
//     its MANIFEST before anything resumes from it (verifyCopy): one
//     damaged since is sent again, never handed out.
//   - One name saved on several hosts (each its own shard or copy) is one
//     checkpoint with several holders, and each of them resumes from its
//     own; only a name saved again on one host is a new checkpoint.
//     drover never writes to, deletes or changes anything in the user's
//     checkpoint_dir; of its own copies it keeps the newest checkpoint_keep
//     per host.
//   - Copies stream through a fixed-size buffer, one checkpoint at a time:
//     memory does not grow with checkpoint size.
//   - No copy waits for ever on a host: every stream gives up when the
//     other end has not moved for CopyIdle (both ends of a direct copy,
//     and the relay's reads from its source), the controller stops the
//     ends of a direct copy that outlive another end by as long, and it
//     keeps a bounded part of what they print (see peerProc). A copy that
//     fails goes through the controller; only a pair of hosts that could
//     not connect at all stays that way.
//   - Copies made while training runs read and write through each Host's
//     CopyFS (in drover, a low-priority SFTP server on the host) and are
//     held to Settings.CopyRate; staging, between attempts, uses FS at
//     full speed.
package checkpoint
