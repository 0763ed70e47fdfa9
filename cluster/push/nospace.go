package push

import (
	"errors"
	"fmt"
)

// freeSpacer is an FS that can say how much space is left on the host
// (both of cluster's FSs).
type freeSpacer interface {
	FreeSpace(path string) (int64, error)
}

// NoSpaceError is a push that failed because the host's filesystem is
// full: SFTP reports it as a bare "Failure", tar as a write error. Free
// is what was left when the upload failed, Need what the push sends.
type NoSpaceError struct {
	Host       string
	Free, Need int64
	Err        error // the write's own error
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("no space left on %s (free: %s; this push sends %s): free some space in the workdir's filesystem and push again",
		e.Host, FormatBytes(e.Free), FormatBytes(e.Need))
}

func (e *NoSpaceError) Unwrap() error { return e.Err }

// noSpace turns err, an upload's failure, into a *NoSpaceError when the
// host has less room left than the push sends; else it returns nil. It
// costs one request, and only once something has failed.
func (up *uploader) noSpace(err error, need int64) error {
	fsp, ok := up.fs.(freeSpacer)
	var already *NoSpaceError
	if !ok || err == nil || errors.As(err, &already) {
		return nil
	}
	free, ferr := fsp.FreeSpace(up.workdir)
	if ferr != nil || free >= need {
		return nil
	}
	return &NoSpaceError{Host: up.progress.Host, Free: free, Need: need, Err: err}
}
