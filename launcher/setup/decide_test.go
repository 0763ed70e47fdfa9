package setup

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecide(t *testing.T) {
	want := Stamp{Lines: []string{"python3 -m venv .venv"}, Keys: map[string]string{"lock.txt": "aa", "b.txt": Absent}, Arch: "x86_64"}
	with := func(f func(s *Stamp)) *Stamp {
		s := Stamp{Lines: []string{"python3 -m venv .venv"}, Keys: map[string]string{"lock.txt": "aa", "b.txt": Absent}, Arch: "x86_64"}
		f(&s)
		return &s
	}
	same := with(func(*Stamp) {})
	for _, tc := range []struct {
		name  string
		last  *Stamp
		force bool
		run   bool
		why   string
	}{
		{"never set up", nil, false, true, "not set up here before"},
		{"unchanged", same, false, false, "unchanged since its last setup"},
		{"forced although unchanged", same, true, true, "forced"},
		{"lines changed", with(func(s *Stamp) { s.Lines = []string{"uv sync"} }), false, true, "the setup lines changed"},
		{"a line added", with(func(s *Stamp) { s.Lines = append(s.Lines, "pip install x") }), false, true, "the setup lines changed"},
		{"key content changed", with(func(s *Stamp) { s.Keys["lock.txt"] = "bb" }), false, true, "lock.txt changed"},
		{"key file created", with(func(s *Stamp) { s.Keys["b.txt"] = "cc" }), false, true, "b.txt changed"},
		{"key newly listed", with(func(s *Stamp) { delete(s.Keys, "b.txt") }), false, true, "b.txt changed"},
		{"key no longer listed", with(func(s *Stamp) { s.Keys["old.lock"] = "dd" }), false, true, "setup_key no longer lists old.lock"},
		{"architecture changed", with(func(s *Stamp) { s.Arch = "aarch64" }), false, true, "the architecture changed (aarch64, now x86_64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, Decision{tc.run, tc.why}, Decide(tc.last, want, tc.force))
		})
	}
}
