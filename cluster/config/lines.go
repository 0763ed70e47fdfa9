package config

import (
	"strconv"
	"strings"
)

// keyLines maps a key path, spelled as ConfigError.Key spells it
// ("job.name", "host[2].address", "job.env.NCCL_DEBUG"), to the 1-based
// line where the file defines it. Table headers are recorded too ("job",
// "host[2]"), so a missing key can be reported at its table.
//
// Why a scanner of our own: BurntSushi/toml (v1.6.0, checked when the
// question came up) records each key's position in MetaData's unexported
// keyInfo map and shows it only inside a ParseError; MetaData, Key and
// Position give no way to ask "where is job.name". And that map is keyed by
// the dotted path without an index, so the keys of [[host]] tables
// overwrite each other: host[2].address and host[5].address are one entry,
// the last. So after the file has parsed, this small scanner walks it once
// more and notes where every key and header is. It never fails: on input it does not
// understand it skips ahead, because its only job is better line numbers.
type keyLines map[string]int

// maxScanDepth bounds the nesting of arrays and inline tables the scanner
// follows; deeper values are skipped as opaque text.
const maxScanDepth = 64

// keyPath joins a parent path and a key the way errors spell them.
func keyPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// indexPath names the n-th (1-based) element of an array of tables.
func indexPath(path string, n int) string {
	return path + "[" + strconv.Itoa(n) + "]"
}

// lineOf returns the line of key, or of its nearest enclosing table that
// has one, or 0.
func (kl keyLines) lineOf(key string) int {
	for key != "" {
		if n, ok := kl[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
	return 0
}

// locateKeys scans TOML source and records where each key is defined.
func locateKeys(src []byte) keyLines {
	s := &lineScanner{src: src, line: 1, out: keyLines{}, aot: map[string]int{}}
	s.document()
	return s.out
}

type lineScanner struct {
	src  []byte
	pos  int
	line int
	out  keyLines
	// aot counts the [[headers]] seen per path, to number their elements.
	aot map[string]int
}

func (s *lineScanner) eof() bool { return s.pos >= len(s.src) }

func (s *lineScanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

func (s *lineScanner) peekAt(off int) byte {
	if s.pos+off >= len(s.src) {
		return 0
	}
	return s.src[s.pos+off]
}

func (s *lineScanner) next() byte {
	c := s.src[s.pos]
	s.pos++
	if c == '\n' {
		s.line++
	}
	return c
}

func (s *lineScanner) record(path string, line int) {
	if _, ok := s.out[path]; !ok {
		s.out[path] = line
	}
}

func (s *lineScanner) skipSpace() {
	for !s.eof() && (s.peek() == ' ' || s.peek() == '\t') {
		s.next()
	}
}

// skipSpaceLines skips blanks, newlines and comments (inside arrays and
// multi-line inline tables).
func (s *lineScanner) skipSpaceLines() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.next()
		case '#':
			s.skipLine()
		default:
			return
		}
	}
}

func (s *lineScanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		s.next()
	}
}

func (s *lineScanner) document() {
	table := ""
	for !s.eof() {
		s.skipSpace()
		switch c := s.peek(); {
		case s.eof():
			return
		case c == '\n' || c == '\r':
			s.next()
		case c == '#':
			s.skipLine()
		case c == '[':
			line := s.line
			s.next()
			array := s.peek() == '['
			if array {
				s.next()
			}
			s.skipSpace()
			keys := s.key()
			table = s.resolve(keys, array)
			if table != "" {
				s.record(table, line)
			}
			s.skipLine()
		default:
			line := s.line
			start := s.pos
			keys := s.key()
			s.skipSpace()
			if len(keys) == 0 || s.peek() != '=' {
				if s.pos == start {
					s.next()
				}
				s.skipLine()
				continue
			}
			s.next()
			path := s.recordDotted(table, keys, line)
			s.value(path, 0)
			s.skipLine()
		}
	}
}

// resolve turns header keys into a path, numbering arrays of tables.
func (s *lineScanner) resolve(keys []string, array bool) string {
	path := ""
	for i, k := range keys {
		path = keyPath(path, k)
		if array && i == len(keys)-1 {
			s.aot[path]++
			return indexPath(path, s.aot[path])
		}
		if n := s.aot[path]; n > 0 {
			path = indexPath(path, n)
		}
	}
	return path
}

// recordDotted records a (possibly dotted) key and its implied tables.
func (s *lineScanner) recordDotted(parent string, keys []string, line int) string {
	path := parent
	for _, k := range keys {
		path = keyPath(path, k)
		s.record(path, line)
	}
	return path
}

// key reads a dotted key: bare or quoted parts separated by dots.
func (s *lineScanner) key() []string {
	var keys []string
	for !s.eof() {
		s.skipSpace()
		var k string
		switch c := s.peek(); {
		case c == '"':
			k = s.basicString()
		case c == '\'':
			k = s.literalString()
		case isBareKeyByte(c):
			start := s.pos
			for !s.eof() && isBareKeyByte(s.peek()) {
				s.next()
			}
			k = string(s.src[start:s.pos])
		default:
			return keys
		}
		keys = append(keys, k)
		s.skipSpace()
		if s.peek() != '.' {
			return keys
		}
		s.next()
	}
	return keys
}

func isBareKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// basicString reads a single-line "..." string and returns its value.
func (s *lineScanner) basicString() string {
	start := s.pos
	s.next() // opening quote
	for !s.eof() {
		switch s.peek() {
		case '\\':
			s.next()
			if !s.eof() && s.peek() != '\n' {
				s.next()
			}
		case '"':
			s.next()
			raw := string(s.src[start:s.pos])
			if v, err := strconv.Unquote(raw); err == nil {
				return v
			}
			return raw[1 : len(raw)-1]
		case '\n':
			return string(s.src[start+1 : s.pos])
		default:
			s.next()
		}
	}
	return string(s.src[start+1 : s.pos])
}

// literalString reads a single-line '...' string and returns its value.
func (s *lineScanner) literalString() string {
	s.next()
	start := s.pos
	for !s.eof() && s.peek() != '\'' && s.peek() != '\n' {
		s.next()
	}
	v := string(s.src[start:s.pos])
	if s.peek() == '\'' {
		s.next()
	}
	return v
}

// multiline skips a multi-line string (three quote characters q open and
// close it) whose opening delimiter is at pos.
func (s *lineScanner) multiline(q byte) {
	s.pos += 3
	for !s.eof() {
		c := s.peek()
		if c == '\\' && q == '"' {
			s.next()
			if !s.eof() {
				s.next()
			}
			continue
		}
		if c == q && s.peekAt(1) == q && s.peekAt(2) == q {
			s.pos += 3
			// Up to two quotes right before the closing delimiter
			// belong to the content.
			for i := 0; i < 2 && s.peek() == q; i++ {
				s.pos++
			}
			return
		}
		s.next()
	}
}

// value skips one value, recording the keys of inline tables under path.
func (s *lineScanner) value(path string, depth int) {
	s.skipSpace()
	if depth > maxScanDepth {
		s.skipLine()
		return
	}
	switch c := s.peek(); {
	case c == '"' || c == '\'':
		if s.peekAt(1) == c && s.peekAt(2) == c {
			s.multiline(c)
		} else if c == '"' {
			s.basicString()
		} else {
			s.literalString()
		}
	case c == '[':
		s.next()
		for n := 1; !s.eof(); n++ {
			s.skipSpaceLines()
			if s.peek() == ']' {
				s.next()
				return
			}
			start := s.pos
			s.value(indexPath(path, n), depth+1)
			s.skipSpaceLines()
			if s.peek() == ',' {
				s.next()
			} else if s.peek() != ']' && s.pos == start && !s.eof() {
				s.next() // not understood; make progress
			}
		}
	case c == '{':
		s.record(path, s.line)
		s.next()
		for !s.eof() {
			s.skipSpaceLines()
			if s.peek() == '}' {
				s.next()
				return
			}
			line, start := s.line, s.pos
			keys := s.key()
			s.skipSpace()
			if len(keys) > 0 && s.peek() == '=' {
				s.next()
				s.value(s.recordDotted(path, keys, line), depth+1)
			}
			s.skipSpaceLines()
			if s.peek() == ',' {
				s.next()
			} else if s.peek() != '}' && s.pos == start && !s.eof() {
				s.next()
			}
		}
	default:
		// Numbers, booleans, dates: up to the next delimiter.
		for !s.eof() {
			switch s.peek() {
			case ',', ']', '}', '\n', '\r', '#':
				return
			}
			s.next()
		}
	}
}
