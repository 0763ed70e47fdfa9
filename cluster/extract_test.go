package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"under the limit", []string{"ab", "cd"}, "abcd"},
		{"exactly the limit", []string{"abcdefgh"}, "abcdefgh"},
		{"over, in one write", []string{"0123456789"}, "23456789"},
		{"over, across writes", []string{"tar: a\n", "tar: b\n"}, "\ntar: b\n"},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewTailBuffer(8)
			for _, w := range tc.writes {
				n, err := b.Write([]byte(w))
				assert.NoError(t, err)
				assert.Equal(t, len(w), n, "Write reports everything written")
			}
			assert.Equal(t, tc.want, b.String())
			assert.LessOrEqual(t, len(b.String()), 8)
			assert.True(t, strings.HasSuffix(strings.Join(tc.writes, ""), b.String()))
		})
	}
}
