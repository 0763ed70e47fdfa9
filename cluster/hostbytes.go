package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// A host is not trusted: what it prints, and the names it lists, reach
// drover's memory, its terminal and paths on other machines. The helpers
// here are the one way drover takes them in: names are checked before they
// become part of a path (CheckName), output is kept to a bound (HeadBuffer)
// and quoted with its control characters escaped (Escape, QuoteHost).

// QuoteLimit is how much of a host's output an error or event quotes: the
// first lines say what went wrong; the rest is counted, not shown.
const QuoteLimit = 2 << 10

// BadNameError is a name a host listed that cannot be one entry of a
// directory: "", ".", "..", or a name holding "/" or NUL. Joined onto a
// path it would name another place (`x/..` is the directory above), so
// drover refuses it rather than follow it.
type BadNameError struct {
	Host string
	Dir  string // the directory it was listed in, as drover named it
	Name string
}

func (e *BadNameError) Error() string {
	name := strconv.Quote(e.Name)
	if len(e.Name) > 256 {
		name = strconv.Quote(e.Name[:256]) + fmt.Sprintf("... %d more bytes", len(e.Name)-256)
	}
	return fmt.Sprintf("%s listed %s in %s, which is not a file name (empty, . or .., or holding / or NUL); refused, nothing was written for it",
		e.Host, name, Escape(e.Dir))
}

// CheckName returns a *BadNameError when name, listed by host in dir, is
// not a single path element that stays inside dir.
func CheckName(host, dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return &BadNameError{Host: host, Dir: dir, Name: name}
	}
	return nil
}

// Escape returns s with every control character (C0 but tab, DEL, C1),
// every invalid UTF-8 byte and the bidirectional overrides written as Go
// escapes (\n, \x1b, \u202e), so that text from a host cannot move the
// cursor, clear the screen or start a line that looks like drover's own.
// Printable text, spaces and tabs stay as they are.
func Escape(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// EscapeLines is Escape for text whose lines are meant (an error listing
// several problems): each line is escaped, the newlines between them kept.
// The terminal is safe; a host's own text should still be escaped where it
// is quoted, so that it cannot start a line.
func EscapeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Escape(l)
	}
	return strings.Join(lines, "\n")
}

// unsafeRune reports runes a terminal acts on rather than shows.
func unsafeRune(r rune) bool {
	if r == '\t' {
		return false
	}
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// QuoteHost renders at most limit bytes of b, escaped, followed by
// "... N more bytes" when b is longer; more is what was not even kept
// (HeadBuffer.More) and is added to the count.
func QuoteHost(b []byte, more int64, limit int) string {
	if len(b) > limit {
		more += int64(len(b) - limit)
		b = b[:limit]
		// Do not cut a UTF-8 sequence in two: the half would show as
		// escapes.
		for k := 0; k < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); k++ {
			more++
			b = b[:len(b)-1]
		}
	}
	s := Escape(string(b))
	if more > 0 {
		s += fmt.Sprintf("... %d more bytes", more)
	}
	return s
}

// HeadBuffer keeps the first bytes of a host's output up to its limit and
// only counts the rest, so a host printing gigabytes costs drover its
// limit in memory. When the limit is first exceeded it calls full (when
// set): a caller that has no use for more stops the command there.
// Writes never fail: a command whose writer fails may block on its
// channel until it times out.
type HeadBuffer struct {
	mu    sync.Mutex
	limit int
	b     []byte
	more  int64
	full  func()
}

// NewHeadBuffer returns a HeadBuffer keeping limit bytes.
func NewHeadBuffer(limit int, full func()) *HeadBuffer {
	return &HeadBuffer{limit: limit, full: full}
}

func (h *HeadBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	n := min(len(p), h.limit-len(h.b))
	h.b = append(h.b, p[:n]...)
	wasFull := h.more > 0
	h.more += int64(len(p) - n)
	call := !wasFull && h.more > 0 && h.full != nil
	h.mu.Unlock()
	if call {
		h.full()
	}
	return len(p), nil
}

// Bytes returns what was kept (a copy).
func (h *HeadBuffer) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]byte(nil), h.b...)
}

// More is how many bytes were written beyond the limit.
func (h *HeadBuffer) More() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.more
}

// Quote is QuoteHost of what was kept, counting what was not.
func (h *HeadBuffer) Quote(limit int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return QuoteHost(h.b, h.more, limit)
}

// Overflow returns a *TooMuchOutputError when more than the limit was
// written, nil otherwise.
func (h *HeadBuffer) Overflow(host, what string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.more == 0 {
		return nil
	}
	return &TooMuchOutputError{Host: host, What: what, Limit: h.limit, Quote: QuoteHost(h.b, h.more, QuoteLimit)}
}

// TooMuchOutputError is a host printing more than drover reads of that
// output; the command was stopped at the limit.
type TooMuchOutputError struct {
	Host  string
	What  string // what printed it ("the probe's nvidia-smi")
	Limit int
	Quote string // the first bytes, escaped
}

func (e *TooMuchOutputError) Error() string {
	return fmt.Sprintf("%s: %s printed more than %d bytes, more than it can mean; stopped there (check the login shell's rc files on the host for output): %s",
		e.Host, e.What, e.Limit, e.Quote)
}
