package sweep

import "fmt"

// Error is a sweep's bad input: where it was written (a flag such as
// "--param lr", or the job file's "[sweep] params.lr"), what is wrong and
// the fix. cmd/drover exits 2 for it, as for a configuration error.
type Error struct {
	Source string
	Msg    string
	Fix    string
}

func (e *Error) Error() string {
	s := e.Msg
	if e.Source != "" {
		s = e.Source + ": " + e.Msg
	}
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

func errorf(source, fix, format string, args ...any) *Error {
	return &Error{Source: source, Msg: fmt.Sprintf(format, args...), Fix: fix}
}
