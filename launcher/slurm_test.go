package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/cluster/config"
)

// TestWorkdirClaims: slurm nodes that share this machine's filesystem get
// one push per workdir and none into the code directory; any other host
// always gets its own.
func TestWorkdirClaims(t *testing.T) {
	home := t.TempDir()
	code := filepath.Join(home, "code")
	if err := os.Mkdir(code, 0o755); err != nil {
		t.Fatal(err)
	}
	// A link to the code directory is the code directory.
	if err := os.Symlink(code, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	slurmHost := func(name, wd string) config.Host {
		return config.Host{Name: name, Transport: config.TransportSlurm, Workdir: wd}
	}
	for _, tc := range []struct {
		name  string
		hosts []config.Host
		want  []bool // pushed
	}{
		{"one shared workdir", []config.Host{slurmHost("n1", "work"), slurmHost("n2", "work"), slurmHost("n3", home+"/work")}, []bool{true, false, false}},
		{"two workdirs", []config.Host{slurmHost("n1", "a"), slurmHost("n2", "b"), slurmHost("n3", "a")}, []bool{true, true, false}},
		{"the code directory", []config.Host{slurmHost("n1", "code"), slurmHost("n2", "link")}, []bool{false, false}},
		{"ssh hosts push each", []config.Host{{Name: "h1", Workdir: "work"}, {Name: "h2", Workdir: "work"}}, []bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := newWorkdirClaims(code)
			var got []bool
			for _, h := range tc.hosts {
				// No transport that says otherwise: a slurm node shares
				// this machine's filesystem.
				got = append(got, claims.skip(h, nil, home) == "")
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
