package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "x/..", "/", "a/b", "a\x00b", "../etc"} {
		err := CheckName("h1", "/ck", bad)
		var be *BadNameError
		if assert.True(t, errors.As(err, &be), "%q is refused", bad) {
			assert.Equal(t, "h1", be.Host)
			assert.Equal(t, bad, be.Name)
			assert.NotContains(t, err.Error(), "\x00", "the name is quoted in the message")
		}
	}
	long := CheckName("h1", "/ck", strings.Repeat("a/", 10000)).Error()
	assert.Contains(t, long, "... 19744 more bytes")
	assert.Less(t, len(long), 1024)
	for _, good := range []string{"step-10.pt", "...", "..a", ".hidden", "\x1b[2J\nforged", "a b"} {
		assert.NoError(t, CheckName("h1", "/ck", good), "%q is one entry", good)
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith tab", "plain text\twith tab"},
		{"\x1b[2J\nforged", `\x1b[2J\nforged`},
		{"bell\a del\x7f", `bell\a del\x7f`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"bad utf8 \xff", `bad utf8 \xff`},
		{"rtl \u202egnp.exe", `rtl \u202egnp.exe`},
		{"ünïcödé", "ünïcödé"},
	} {
		assert.Equal(t, tc.want, Escape(tc.in), "%q", tc.in)
	}
}

func TestQuoteHost(t *testing.T) {
	assert.Equal(t, `hello\n`, QuoteHost([]byte("hello\n"), 0, 10))
	assert.Equal(t, `0123456789... 5 more bytes`, QuoteHost([]byte("012345678901234"), 0, 10))
	assert.Equal(t, `0123456789... 105 more bytes`, QuoteHost([]byte("012345678901234"), 100, 10))
	// A cut in the middle of a UTF-8 sequence drops the half.
	assert.Equal(t, `abc... 2 more bytes`, QuoteHost([]byte("abcé"), 0, 4))
}

// TestHeadBufferBounded writes far more than the limit and checks only the
// limit is kept, the rest counted, and full called once.
func TestHeadBufferBounded(t *testing.T) {
	calls := 0
	h := NewHeadBuffer(1024, func() { calls++ })
	chunk := []byte(strings.Repeat("x", 64<<10))
	for range 1600 { // 100 MiB
		n, err := h.Write(chunk)
		assert.NoError(t, err)
		assert.Equal(t, len(chunk), n)
	}
	assert.Len(t, h.Bytes(), 1024)
	assert.Equal(t, int64(100<<20-1024), h.More())
	assert.Equal(t, 1, calls)
	err := h.Overflow("h1", "uname")
	var tm *TooMuchOutputError
	if assert.True(t, errors.As(err, &tm)) {
		assert.Contains(t, err.Error(), "h1: uname printed more than 1024 bytes")
		assert.Contains(t, err.Error(), "more bytes")
		assert.Less(t, len(err.Error()), 4<<10)
	}
	assert.NoError(t, NewHeadBuffer(10, nil).Overflow("h1", "x"))
}
