package agent

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// UsageLine is the one-line usage of cmd, made from its flags and
// ArgsUsage rather than written by hand, so that it cannot name a flag
// the command lacks or leave out one it has (eleven hand-written ones had
// drifted): "usage: drover agent stop --pidfile FILE [--grace DURATION]".
// Every drover command prints it on a usage error, cmd/drover's too.
// Required flags are shown bare, the others in brackets, a repeatable one
// with "...". A flag's placeholder is the back-quoted word of its Usage
// (as urfave/cli's help shows it), else FILE for a file, else its kind.
func UsageLine(cmd *cli.Command) string {
	name := cmd.HelpName
	if name == "" {
		name = cmd.Name
	}
	parts := []string{"usage:", name}
	for _, f := range cmd.Flags {
		if v, ok := f.(cli.VisibleFlag); (ok && !v.IsVisible()) || f == cli.HelpFlag {
			continue
		}
		parts = append(parts, flagUsage(f))
	}
	if cmd.ArgsUsage != "" {
		parts = append(parts, cmd.ArgsUsage)
	}
	return strings.Join(parts, " ")
}

// flagUsage is one flag as UsageLine shows it: "[--port PORT]...".
func flagUsage(f cli.Flag) string {
	s := "--" + f.Names()[0]
	if d, ok := f.(cli.DocGenerationFlag); ok && d.TakesValue() {
		s += " " + placeholder(f, d.GetUsage())
	}
	if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
		return s
	}
	s = "[" + s + "]"
	if _, ok := f.(*cli.StringSliceFlag); ok {
		s += "..."
	}
	return s
}

// placeholder names a flag's value: the back-quoted word of its usage,
// FILE for a file, or what kind of value it takes.
func placeholder(f cli.Flag, usage string) string {
	if i := strings.IndexByte(usage, '`'); i >= 0 {
		if j := strings.IndexByte(usage[i+1:], '`'); j > 0 {
			return usage[i+1 : i+1+j]
		}
	}
	switch f := f.(type) {
	case *cli.DurationFlag:
		return "DURATION"
	case *cli.IntFlag, *cli.UintFlag, *cli.Int64Flag:
		return "N"
	case *cli.StringFlag:
		if f.TakesFile {
			return "FILE"
		}
	}
	return strings.ToUpper(strings.ReplaceAll(f.Names()[0], "-", "_"))
}
