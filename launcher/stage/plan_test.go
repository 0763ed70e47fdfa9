package stage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var src = Listing{
	"a":     {Size: 10, MTime: 100},
	"d/b":   {Size: 20, MTime: 200},
	"d/e/c": {Size: 30, MTime: 300},
}

// staged is a host where drover staged src and nothing moved since.
func staged() HostState {
	m, d := Listing{}, Listing{}
	for rel, f := range src {
		f.Sum = "sum-" + rel
		m[rel], d[rel] = f, f
	}
	return HostState{Name: "h", Manifest: m, Disk: d, Free: -1}
}

func TestNeeds(t *testing.T) {
	tests := []struct {
		name   string
		host   func(h *HostState)
		verify bool
		want   []string
	}{
		{name: "fresh host", host: func(h *HostState) { h.Manifest, h.Disk = nil, nil }, want: []string{"a", "d/b", "d/e/c"}},
		{name: "nothing changed", want: nil},
		{name: "nothing changed, verified", verify: true, want: nil},
		{name: "deleted on the host", host: func(h *HostState) { delete(h.Disk, "d/b") }, want: []string{"d/b"}},
		{name: "changed in the source (mtime)", host: func(h *HostState) { f := h.Manifest["a"]; f.MTime = 99; h.Manifest["a"] = f }, want: []string{"a"}},
		{name: "changed on the host (size)", host: func(h *HostState) { f := h.Disk["a"]; f.Size = 11; h.Disk["a"] = f }, want: []string{"a"}},
		{name: "changed on the host (mtime)", host: func(h *HostState) { f := h.Disk["a"]; f.MTime = 1; h.Disk["a"] = f }, want: []string{"a"}},
		{name: "on disk, not in the manifest (put there by hand)", host: func(h *HostState) { delete(h.Manifest, "d/e/c") }, want: []string{"d/e/c"}},
		{name: "manifest without a sum", host: func(h *HostState) { f := h.Manifest["a"]; f.Sum = ""; h.Manifest["a"] = f }, want: []string{"a"}},
		{name: "corrupted, same size and mtime, not verified", host: func(h *HostState) { f := h.Disk["d/b"]; f.Sum = "bad"; h.Disk["d/b"] = f }, want: nil},
		{name: "corrupted, same size and mtime, verified", verify: true, host: func(h *HostState) { f := h.Disk["d/b"]; f.Sum = "bad"; h.Disk["d/b"] = f }, want: []string{"d/b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := staged()
			if tc.host != nil {
				tc.host(&h)
			}
			assert.Equal(t, tc.want, Needs(src, h, tc.verify))
		})
	}
}

func TestMakePlan(t *testing.T) {
	fresh := func(name string) HostState { return HostState{Name: name, Free: -1} }
	done := func(name string) HostState { h := staged(); h.Name = name; return h }
	missingB := func(name string) HostState { h := done(name); delete(h.Disk, "d/b"); return h }
	tests := []struct {
		name     string
		hosts    []HostState
		maxBytes int64
		maxFiles int
		want     []Batch
	}{
		{name: "every host fresh: one chain through all", hosts: []HostState{fresh("h1"), fresh("h2"), fresh("h3")},
			want: []Batch{{Hosts: []string{"h1", "h2", "h3"}, Files: []string{"a", "d/b", "d/e/c"}, Bytes: 60}}},
		{name: "nothing to do", hosts: []HostState{done("h1"), done("h2")}, want: nil},
		{name: "hosts needing the same files share a chain, in job order", hosts: []HostState{fresh("h1"), missingB("h2"), done("h3"), missingB("h4")},
			want: []Batch{
				{Hosts: []string{"h1"}, Files: []string{"a", "d/b", "d/e/c"}, Bytes: 60},
				{Hosts: []string{"h2", "h4"}, Files: []string{"d/b"}, Bytes: 20},
			}},
		{name: "cut by bytes; a large file is a batch of its own", hosts: []HostState{fresh("h1")}, maxBytes: 25,
			want: []Batch{
				{Hosts: []string{"h1"}, Files: []string{"a"}, Bytes: 10},
				{Hosts: []string{"h1"}, Files: []string{"d/b"}, Bytes: 20},
				{Hosts: []string{"h1"}, Files: []string{"d/e/c"}, Bytes: 30},
			}},
		{name: "cut by files", hosts: []HostState{fresh("h1")}, maxFiles: 2,
			want: []Batch{
				{Hosts: []string{"h1"}, Files: []string{"a", "d/b"}, Bytes: 30},
				{Hosts: []string{"h1"}, Files: []string{"d/e/c"}, Bytes: 30},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := MakePlan(src, tc.hosts, false, tc.maxBytes, tc.maxFiles)
			assert.Equal(t, tc.want, p.Batches)
			for _, h := range tc.hosts {
				assert.Equal(t, len(src), len(p.Need[h.Name])+p.Unchanged[h.Name], h.Name)
			}
		})
	}
}

func TestCheckSpace(t *testing.T) {
	hosts := []HostState{
		{Name: "h1", Free: 1 << 20, Dest: "/w/data"},
		{Name: "h2", Free: 50, Dest: "/w/data"},
		{Name: "h3", Free: -1, Dest: "/w/data"},
	}
	p := MakePlan(src, hosts, false, 0, 0)
	errs := CheckSpace(src, hosts, p)
	require.Len(t, errs, 1)
	var ns *NoSpaceError
	require.True(t, errors.As(errs[0], &ns))
	assert.Equal(t, NoSpaceError{Host: "h2", Dest: "/w/data", Need: 60, Free: 50}, *ns)
	assert.Equal(t, "stage onto h2: /w/data needs 60 B, 50 B free there; free some space on h2 or choose another dest", ns.Error())
}

func TestUpdate(t *testing.T) {
	old := Listing{"a": {Size: 10, MTime: 100, Sum: "s-a"}, "gone": {Size: 1, MTime: 1, Sum: "s-g"}}
	got := Update(old, src, map[string]string{"d/b": "s-b"})
	assert.Equal(t, Listing{"a": {Size: 10, MTime: 100, Sum: "s-a"}, "d/b": {Size: 20, MTime: 200, Sum: "s-b"}}, got)
}

func TestHumanBytes(t *testing.T) {
	assert.Equal(t, "1023 B", HumanBytes(1023))
	assert.Equal(t, "40.0 MiB", HumanBytes(40<<20))
	assert.Equal(t, "1.5 GiB", HumanBytes(3<<29))
}

func TestParseFind(t *testing.T) {
	l, err := parseFind([]byte("10 1700000000.5000000000 a/b c\x005 1700000001.0000000000 d\x00"))
	require.NoError(t, err)
	assert.Equal(t, Listing{"a/b c": {Size: 10, MTime: 1700000000}, "d": {Size: 5, MTime: 1700000001}}, l)
	for _, bad := range []string{"1 2 ../x\x00", "1 2 /etc/passwd\x00", "x 2 a\x00", "1 2\x00"} {
		_, err := parseFind([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}

func TestParseDuTotal(t *testing.T) {
	for in, want := range map[string]int64{
		"12345\ttotal\n": 12345,
		"777\t/h/.drover-stage.data/1\n777\ttotal\n": 777,
		"12\t/x.tmp\n12x\ttotal\n":                   -1,
		"0\ttotal\nmore\n":                           -1,
		"0\ttotal":                                   0,
		"":                                           -1,
		"du: oops\n":                                 -1,
		"12x\ttotal":                                 -1,
		"-3\ttotal":                                  -1,
	} {
		assert.Equal(t, want, parseDuTotal(in), "%q", in)
	}
	assert.Equal(t, "50.0 MiB of 200.0 MiB received (25%)", progressLine(50<<20, 200<<20))
}
