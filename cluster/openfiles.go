package cluster

import (
	"errors"
	"fmt"
	"syscall"
)

// TooManyOpenFilesError says that this machine, not a host, ran out of
// file descriptors (EMFILE, or ENFILE for the whole system): drover holds
// a connection per host and some local files per push. It is neither an
// unreachable host nor a refused key, and is named as itself so that it
// is never taken for either: reading the identity file failed with EMFILE
// at 40 hosts and was reported as "auth failed ... no usable key".
type TooManyOpenFilesError struct {
	Op    string // what failed: "read identity file /home/u/.ssh/id_ed25519"
	Limit uint64 // the soft RLIMIT_NOFILE; 0 when unknown
	Err   error
}

func (e *TooManyOpenFilesError) Error() string {
	limit := ""
	if e.Limit > 0 {
		limit = fmt.Sprintf(" (ulimit -n %d)", e.Limit)
	}
	return fmt.Sprintf("%s: too many open files%s on this machine (drover holds a connection per host): raise the limit, e.g. ulimit -n 4096, or reach fewer hosts at once", e.Op, limit)
}

func (e *TooManyOpenFilesError) Unwrap() error { return e.Err }

// IsTooManyOpenFiles reports whether err is this machine running out of
// file descriptors (EMFILE or ENFILE), named yet or not.
func IsTooManyOpenFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// NameOpenFiles returns err as a *TooManyOpenFilesError for op when it is
// EMFILE or ENFILE, and err unchanged otherwise (nil included).
func NameOpenFiles(op string, err error) error {
	if !IsTooManyOpenFiles(err) {
		return err
	}
	var already *TooManyOpenFilesError
	if errors.As(err, &already) {
		return err
	}
	return &TooManyOpenFilesError{Op: op, Limit: OpenFileLimit(), Err: err}
}
