package cluster

import (
	"sort"
	"strings"
)

// ShellQuote quotes s for a POSIX shell so that the shell passes it on as
// one word, byte for byte: it is wrapped in single quotes, inside which no
// character is special, and each single quote in s becomes '\” (close,
// escaped quote, reopen). The empty string becomes ” so that it stays an
// argument rather than vanishing.
func ShellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, needsQuote) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// needsQuote reports runes outside the set that no POSIX shell treats
// specially anywhere in a word, so that plain words (program names, paths)
// stay readable in logs and only the rest pays for quoting.
func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	switch r {
	case '-', '_', '.', '/', ',', ':', '@', '+', '%':
		return false
	}
	return true
}

// ShellCommand renders c as one command line for the login shell that sshd
// runs (`$SHELL -c LINE`): change to c.Dir, export c.Env, then exec the
// program so that its exit status and signal reach the SSH client directly.
// Every directory, value and argument is quoted with ShellQuote, so nothing in
// c is ever interpreted as shell code. Env names that are not valid shell
// identifiers are quoted too: the shell rejects them instead of running
// anything. Env entries are sorted so the line is deterministic.
//
// A c.Shell line is the exception: it is the user's own shell code and goes
// to the shell as it is, behind the same cd and export. It is not exec'd,
// since it may be a pipeline or a list; Process.Signal reaches it anyway,
// because sshd signals the session's whole process group.
func ShellCommand(c Cmd) string {
	var b strings.Builder
	if c.Dir != "" {
		b.WriteString("cd -- ")
		b.WriteString(ShellQuote(c.Dir))
		b.WriteString(" && ")
	}
	if len(c.Env) > 0 {
		names := make([]string, 0, len(c.Env))
		for k := range c.Env {
			names = append(names, k)
		}
		sort.Strings(names)
		b.WriteString("export")
		for _, k := range names {
			b.WriteByte(' ')
			if ValidEnvName(k) {
				b.WriteString(k)
			} else {
				b.WriteString(ShellQuote(k))
			}
			b.WriteByte('=')
			b.WriteString(ShellQuote(c.Env[k]))
		}
		b.WriteString(" && ")
	}
	if c.Shell != "" {
		if b.Len() == 0 {
			return c.Shell
		}
		// eval keeps the whole line behind the &&: a plain `cd X && a; b`
		// would run b even when cd failed.
		b.WriteString("eval ")
		b.WriteString(ShellQuote(c.Shell))
		return b.String()
	}
	b.WriteString("exec")
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(ShellQuote(a))
	}
	return b.String()
}
