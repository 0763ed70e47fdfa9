package config

import (
	"errors"
	"fmt"
	"strings"
)

// ConfigError is a problem in a job or inventory file. Like os.PathError it
// carries where (file, line, key), what, and the fix, so that the message a
// user sees is enough to correct the file without reading drover's source.
type ConfigError struct {
	File string // path as the user gave it or absolute
	Line int    // 1-based; 0 when unknown
	Key  string // dotted key, e.g. "job.framework" or "host[2].address"
	Msg  string // what is wrong
	Fix  string // what to do about it; may be empty
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString(" (")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// ConfigErrors is every problem found in one load, so a user fixes them all
// in one pass rather than one per run.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// IsConfigError reports whether err is (or wraps) a configuration problem,
// which the CLI maps to exit status 2.
func IsConfigError(err error) bool {
	var ce *ConfigError
	var ces ConfigErrors
	return errors.As(err, &ce) || errors.As(err, &ces)
}
