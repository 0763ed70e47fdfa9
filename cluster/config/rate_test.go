package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseByteRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "0", want: 0},
		{in: "50MB/s", want: 50_000_000},
		{in: " 1.5 GiB/s ", want: 3 << 29},
		{in: "800kB/s", want: 800_000},
		{in: "64KiB/s", want: 64 << 10},
		{in: "10B/s", want: 10},
		{in: "50MB", err: "must end in /s"},
		{in: "MB/s", err: "must start with a number"},
		{in: "1.2.3MB/s", err: "not a rate"},
		{in: "50mb/s", err: `unknown unit "mb"`},
		{in: "0MB/s", err: "at least 1 B/s"},
		{in: "0.1B/s", err: "at least 1 B/s"},
	} {
		got, err := ParseByteRate(c.in)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.in)
			continue
		}
		if assert.NoError(t, err, c.in) {
			assert.Equal(t, c.want, got, c.in)
		}
	}
}
