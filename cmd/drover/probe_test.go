package main

import (
	"testing"

	"github.com/droverhq/drover/cluster/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPickHosts(t *testing.T) {
	all := []config.Host{{Name: "h0"}, {Name: "h1"}, {Name: "h2"}, {Name: "s", Spare: true}}
	tests := []struct {
		list       string
		withSpares bool
		want       []string
		wantErr    string
	}{
		{list: "", want: []string{"h0", "h1", "h2"}},
		{list: "", withSpares: true, want: []string{"h0", "h1", "h2", "s"}},
		{list: "s,h1", want: []string{"h1", "s"}},
		{list: "h2, h0", want: []string{"h0", "h2"}},
		{list: "h1,", want: []string{"h1"}},
		{list: "h1,zz,aa", wantErr: "--hosts: no host named aa, zz in the inventory (hosts: h0, h1, h2, s)"},
	}
	for _, tt := range tests {
		got, err := pickHosts(all, tt.list, tt.withSpares)
		if tt.wantErr != "" {
			assert.EqualError(t, err, tt.wantErr)
			continue
		}
		require.NoError(t, err)
		var names []string
		for _, h := range got {
			names = append(names, h.Name)
		}
		assert.Equal(t, tt.want, names, "list %q", tt.list)
	}
}
