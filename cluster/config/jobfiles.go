package config

import (
	"fmt"
	"strings"
)

// filesReader reads the [job] keys of the job's files: the workdir on the
// hosts, where checkpoints are written and how they are recognised, the
// copies drover keeps of them (and their mirror here), and what the push
// leaves out; it refuses places where a checkpoint would overwrite or be
// pushed with the code.
type filesReader struct{ *walker }

// jobFiles reads where the job's files go on the hosts and what is kept
// of them: workdir, checkpoints and their copies, push exclusions.
func (w filesReader) jobFiles(t tbl, j *Job, dir string) {
	j.Workdir = "drover/" + j.Name
	if s, ok := w.remotePath(t, "workdir"); ok {
		j.Workdir = s
	}
	if s, ok := w.remotePath(t, "checkpoint_dir"); ok {
		j.CheckpointDir = s
		w.checkCheckpointDir(t, s, j.Workdir)
	}
	if s, ok := w.str(t, "checkpoint_marker"); ok {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00\n") {
			w.add(t.key("checkpoint_marker"), fmt.Sprintf("%s is not a file name", show(s)),
				`write the name of a file inside each checkpoint, e.g. checkpoint_marker = "DONE", or remove the line`)
		} else {
			j.CheckpointMarker = s
		}
	}
	if s, ok := w.str(t, "checkpoint_layout"); ok {
		switch s {
		case LayoutSingle, LayoutSharded:
			j.CheckpointLayout = s
		default:
			w.add(t.key("checkpoint_layout"), fmt.Sprintf("%s is not a checkpoint layout", show(s)),
				`write checkpoint_layout = "sharded" when every host writes its own part of each checkpoint (DCP, FSDP), or "single" (the default)`)
		}
	}
	if j.CheckpointLayout == LayoutSharded && j.CheckpointMarker == "" {
		j.CheckpointMarker = DefaultShardedMarker
	}
	w.checkpointCopies(t, j, dir)
	if pats, ok := w.strList(t, "exclude"); ok {
		for _, p := range pats {
			if strings.TrimSpace(p) == "" {
				w.add(t.key("exclude"), "contains an empty pattern", `remove the "" element; patterns look like "data/" or "*.pt"`)
			}
		}
		j.Exclude = pats
	}
	w.checkCheckpointMirror(t, j, dir)
}

// checkpointCopies reads the keys of drover's checkpoint copies.
func (w filesReader) checkpointCopies(t tbl, j *Job, dir string) {
	if n, ok := w.integer(t, "checkpoint_copies", 1, 64, "between 1 and 64 (1 turns copying off)"); ok {
		j.CheckpointCopies = n
	}
	if n, ok := w.integer(t, "checkpoint_keep", 1, 1000, "between 1 and 1000"); ok {
		j.CheckpointKeep = n
	}
	if p, ok := w.localPath(t, "checkpoint_mirror", dir); ok && p != "" {
		j.CheckpointMirror = p
	}
	if r, ok := w.byteRate(t, "checkpoint_copy_rate"); ok {
		j.CheckpointCopyRate = r
	}
	if r, ok := w.byteRate(t, "data_copy_rate"); ok {
		j.DataCopyRate = r
	}
}
