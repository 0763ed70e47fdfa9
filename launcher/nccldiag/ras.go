package nccldiag

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// NCCL's RAS client protocol (src/ras/client.cc and client_support.cc in
// NVIDIA/nccl), one TCP connection per query, lines ending in "\n":
//
//	client: CLIENT PROTOCOL 2      server: SERVER PROTOCOL <n>
//	client: TIMEOUT <secs>         server: OK
//	client: STATUS                 server: the report as text, then it closes
//
// A different server version is not fatal (ncclras itself carries on);
// TIMEOUT bounds how long the RAS thread waits for its peers' answers.
const (
	rasProtocol = 2
	// lineLimit bounds a handshake line (ncclras reads into 1 KiB).
	lineLimit = 1024
)

// RASOptions bound one query.
type RASOptions struct {
	// Timeout bounds the whole query, connect to close; 0: 10 s.
	Timeout time.Duration
	// PeerTimeout is the TIMEOUT asked of NCCL for its peers' answers,
	// whole seconds; 0: 5 s (NCCL's own default). Timeout should leave
	// it room.
	PeerTimeout time.Duration
	// Limit bounds the report read, in bytes; 0: 64 KiB. A longer one is
	// cut, and says so.
	Limit int
	// Verbose asks for VERBOSE STATUS.
	Verbose bool
}

// NoRASError is a query that found no RAS service at the address: nothing
// listens (connection refused: the job's NCCL is older than 2.24, RAS is
// off, or the group is gone), or what answers does not speak the
// protocol. Callers stay quiet about it: a hang's verdict stands without
// NCCL's.
type NoRASError struct {
	Addr string
	Err  error
}

func (e *NoRASError) Error() string {
	return fmt.Sprintf("no NCCL RAS service at %s: %v", e.Addr, e.Err)
}

func (e *NoRASError) Unwrap() error { return e.Err }

// Query asks the RAS service at addr (host:port, NCCL_RAS_ADDR) for the
// job's status and returns its report, control characters dropped. A
// report cut by o.Limit or by the deadline is returned with a last line
// saying so, and no error: part of NCCL's answer is still evidence.
func Query(ctx context.Context, addr string, o RASOptions) (string, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.PeerTimeout <= 0 {
		o.PeerTimeout = 5 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 64 << 10
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", &NoRASError{Addr: addr, Err: err}
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r := bufio.NewReaderSize(conn, lineLimit)
	if err := handshake(conn, r, o); err != nil {
		return "", &NoRASError{Addr: addr, Err: err}
	}
	cmd := "STATUS\n"
	if o.Verbose {
		cmd = "VERBOSE STATUS\n"
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("ask the NCCL RAS service at %s for its status: %w", addr, err)
	}
	return readReport(r, o.Limit, addr)
}

// handshake exchanges the protocol versions and sets NCCL's timeout.
func handshake(conn net.Conn, r *bufio.Reader, o RASOptions) error {
	if _, err := fmt.Fprintf(conn, "CLIENT PROTOCOL %d\n", rasProtocol); err != nil {
		return fmt.Errorf("send the handshake: %w", err)
	}
	line, err := readLine(r)
	if err != nil {
		return fmt.Errorf("read the handshake's answer: %w", err)
	}
	const server = "SERVER PROTOCOL "
	if len(line) < len(server) || !strings.EqualFold(line[:len(server)], server) {
		return fmt.Errorf("the answer to the handshake is %q, not %q", clip(Clean(line), 80), server+"N")
	}
	if _, err := strconv.Atoi(strings.TrimSpace(line[len(server):])); err != nil {
		return fmt.Errorf("the server's protocol version %q is not a number", clip(Clean(line[len(server):]), 20))
	}
	secs := max(int(o.PeerTimeout/time.Second), 1)
	if _, err := fmt.Fprintf(conn, "TIMEOUT %d\n", secs); err != nil {
		return fmt.Errorf("send TIMEOUT: %w", err)
	}
	if line, err = readLine(r); err != nil {
		return fmt.Errorf("read the answer to TIMEOUT: %w", err)
	}
	if !strings.EqualFold(strings.TrimSpace(line), "OK") {
		return fmt.Errorf("the answer to TIMEOUT is %q, not OK", clip(Clean(line), 80))
	}
	return nil
}

// readLine reads one line of at most lineLimit bytes, without its "\n".
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("a line longer than %d bytes", lineLimit)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

// readReport reads the report until the server closes, at most limit
// bytes, or until the deadline.
func readReport(r *bufio.Reader, limit int, addr string) (string, error) {
	buf, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	cut := ""
	switch {
	case len(buf) > limit:
		buf, cut = buf[:limit], fmt.Sprintf("[drover: the report was cut at %d bytes]", limit)
	case err != nil && len(buf) > 0:
		cut = fmt.Sprintf("[drover: the report was cut: %v]", err)
	case err != nil:
		return "", fmt.Errorf("read the NCCL RAS service's status at %s: %w", addr, err)
	}
	text := strings.TrimRight(Clean(string(buf)), "\n")
	if cut != "" {
		text += "\n" + cut
	}
	return text, nil
}

// Clean drops what a host's text must not bring to a terminal or a log:
// control characters other than newline and tab (escape sequences among
// them) and invalid UTF-8; "\r\n" becomes "\n".
func Clean(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n <= 1:
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// clip cuts s to n bytes at a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// shortLimit bounds Short's line.
const shortLimit = 300

// Short is one line of a RAS report for an event: the lines of its
// "Errors" section (then of "Warnings") when it has any, else "no errors"
// when it has an empty Errors section, else its first lines; at most
// shortLimit bytes, and "" for an empty report.
func Short(report string) string {
	sections := map[string][]string{}
	var first []string
	cur := ""
	lines := strings.Split(Clean(report), "\n")
	for i, l := range lines {
		t := strings.Join(strings.Fields(l), " ")
		if t == "" || isRule(t) {
			continue
		}
		if i+1 < len(lines) && isRule(strings.TrimSpace(lines[i+1])) {
			cur = strings.ToLower(t)
			sections[cur] = []string{}
			continue
		}
		if cur != "" {
			sections[cur] = append(sections[cur], t)
		}
		if len(first) < 3 {
			first = append(first, t)
		}
	}
	var pick []string
	switch errs, ok := sections["errors"]; {
	case len(errs) > 0:
		pick = errs
	case len(sections["warnings"]) > 0:
		pick = append([]string{"no errors; warnings:"}, sections["warnings"]...)
	case ok:
		pick = []string{"no errors"}
	default:
		pick = first
	}
	return clip(strings.Join(pick, " / "), shortLimit)
}

// isRule says whether a line underlines a heading ("======").
func isRule(l string) bool {
	return len(l) >= 3 && strings.Trim(l, "=-") == ""
}
