// Package stage puts a job's [[data]] sets onto every host of the job:
// `drover stage JOB.toml [--verify]`, and `drover run` before its first
// attempt.
//
// It owns two things. The plan of a staging (plan.go) is pure: given
// what the source holds (each file's size and mtime), what drover staged
// on each host before (its manifest: size, mtime and SHA-256 of every
// file) and what each host's disk holds now, it says which files each
// host needs, groups the hosts that need the same files into one chain,
// cuts a chain's files into batches, and checks each host's free disk
// space against what it will receive. The effects (stage.go, host.go)
// carry the plan out: the bytes go host to host through the checkpoint
// copier's authenticated direct stream (checkpoint.Chain), one chain per
// batch, so that staging onto N hosts takes about the time of staging
// onto one; a local source is uploaded to one host once and chained from
// there.
//
// Rules callers and users rely on:
//
//   - A destination's files are drover's: a file whose size or mtime
//     differs from the source's, or from what the manifest says drover
//     put there, is sent again; files the source no longer has are left
//     on the host and dropped from the manifest. Files land with the
//     source's mtime (whole seconds).
//   - Each batch is received into <dest's parent>/.drover-stage.<dest's
//     name>/ (the stage area, on the destination's filesystem), checked
//     file by file against its SHA-256, then renamed into place, and the
//     manifest (manifest.json in the stage area) is rewritten: an
//     interrupted staging loses at most the batch in flight, and the next
//     one resumes from what the manifest lists.
//   - --verify rehashes every file of every destination and sends again
//     those whose SHA-256 is not the manifest's; without it an unchanged
//     size and mtime is trusted.
//   - Free space is checked on every host before anything is sent; the
//     error names the host, what it needs and what it has free.
//   - A batch in flight reports each host's bytes received every 2 s
//     (progress.go), counted on the host, so a batch of up to 1 GiB on a
//     slow link is never minutes of silence.
package stage
