package slurm

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The wants are what `scontrol show hostnames` (Slurm 22.05) prints.
func TestExpandNodelist(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"gpu[01-03,07],cpu5", []string{"gpu01", "gpu02", "gpu03", "gpu07", "cpu5"}},
		{"node1", []string{"node1"}},
		{"", nil},
		{"n[8-11]", []string{"n8", "n9", "n10", "n11"}},
		{"n[008-010]", []string{"n008", "n009", "n010"}},
		{"n[01-3]", []string{"n01", "n02", "n03"}},
		{"n[1-03]", []string{"n1", "n2", "n3"}},
		{"a[1-2]-b[3-4]", []string{"a1-b3", "a1-b4", "a2-b3", "a2-b4"}},
		{"n[1-2][3-4]", []string{"n13", "n14", "n23", "n24"}},
		{"a,b,,c", []string{"a", "b", "c"}},
		{"a b", []string{"a", "b"}},
		{"[1-2]", []string{"1", "2"}},
		{"dgx-a100-[0-1],dgx-h100-07", []string{"dgx-a100-0", "dgx-a100-1", "dgx-h100-07"}},
		{"n[3,1]", []string{"n3", "n1"}},
		{"n[1-1]", []string{"n1"}},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := ExpandNodelist(tc.list)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestExpandNodelistErrors(t *testing.T) {
	for _, tc := range []struct{ list, msg string }{
		{"n[3-1]", "upper bound below lower"},
		{"n[a-b]", "digits only"},
		{"n[1-2", "'[' without ']'"},
		{"n1-2]", "']' without '['"},
		{"n[[1]]", "nested"},
		{"n[]", "digits only"},
		{"n[1-]", "digits only"},
		{"n[-1]", "digits only"},
		{"n[0-99999999999]", "digits only"}, // beyond 32 bits
		{"n[0-70000]", "more than 65536 names"},
		{"a[0-300]-b[0-300]", "more than 65536 names"},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := ExpandNodelist(tc.list)
			require.Error(t, err, "got %q", got)
			var ne *NodelistError
			require.True(t, errors.As(err, &ne))
			assert.Equal(t, tc.list, ne.List)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// FuzzExpandNodelist: no input panics or expands beyond MaxNodes.
func FuzzExpandNodelist(f *testing.F) {
	for _, s := range []string{"gpu[01-03,07],cpu5", "a[1-2]-b[3-4]", "n[", "]", "n[0-4294967295]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandNodelist(s)
		if err == nil {
			assert.LessOrEqual(t, len(names), MaxNodes)
			for _, n := range names {
				assert.NotEmpty(t, strings.TrimSpace(n))
			}
		}
	})
}
