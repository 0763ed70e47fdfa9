package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadContainer: container loads as written, inline or as
// [job.container], and each mistake is refused on its line with a fix.
func TestLoadContainer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string // after jobHead (lines 1-4), before hostA
		line  int      // of the one error; 0 = loads
		want  Container
		fix   string // in the error's fix
	}{
		{name: "inline", lines: lns(`container = { image = "docker-archive:/srv/img.tar", runtime = "podman", options = ["--shm-size=1g"] }`),
			want: Container{Image: "docker-archive:/srv/img.tar", Runtime: RuntimePodman, Options: []string{"--shm-size=1g"}}},
		{name: "table", lines: lns(`[job.container]`, `image = "nvcr.io/nvidia/pytorch:24.05-py3"`, `runtime = "docker"`),
			want: Container{Image: "nvcr.io/nvidia/pytorch:24.05-py3", Runtime: RuntimeDocker}},
		{name: "apptainer", lines: lns(`container = { image = "/shared/pt.sif", runtime = "apptainer" }`),
			want: Container{Image: "/shared/pt.sif", Runtime: RuntimeApptainer}},
		{name: "unset", lines: nil},
		{name: "no runtime", lines: lns(`container = { image = "pt:1" }`), line: 5, fix: `runtime = "podman"`},
		{name: "unknown runtime", lines: lns(`container = { image = "pt:1", runtime = "podmann" }`), line: 5, fix: `did you mean runtime = "podman"`},
		{name: "no image", lines: lns(`container = { runtime = "docker" }`), line: 5, fix: `image = "nvcr.io`},
		{name: "empty image", lines: lns(`container = { image = " ", runtime = "docker" }`), line: 5, fix: `image = "nvcr.io`},
		{name: "image with an option", lines: lns(`container = { image = "--privileged", runtime = "docker" }`), line: 5, fix: "options = [...]"},
		{name: "image with a space", lines: lns(`container = { image = "pt:1 --privileged", runtime = "docker" }`), line: 5, fix: "the image reference alone"},
		{name: "archive without path", lines: lns(`container = { image = "docker-archive:", runtime = "podman" }`), line: 5, fix: "docker-archive:/path"},
		{name: "a string", lines: lns(`container = "pt:1"`), line: 5, fix: "write it as a table"},
		{name: "unknown key", lines: lns(`container = { image = "pt:1", runtime = "docker", imagee = "x" }`), line: 5, fix: "image"},
		{name: "drover's option", lines: lns(`container = { image = "pt:1", runtime = "docker", options = ["--name=x"] }`), line: 5, fix: `remove "--name=x"`},
		{name: "a label", lines: lns(`container = { image = "pt:1", runtime = "podman", options = ["--label", "a=b"] }`), line: 5, fix: `remove "--label"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(t.TempDir(), "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, tc.lines, hostA)), 0o644))
			cfg, err := Load(job, LoadOptions{})
			if tc.line == 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, cfg.Job.Container)
				assert.Equal(t, tc.want.Image != "", cfg.Job.Container.Set())
				return
			}
			ces := configErrors(t, err)
			require.Len(t, ces, 1, "want one error, got:\n%v", err)
			assert.Equal(t, tc.line, ces[0].Line, "%v", ces[0])
			assert.Contains(t, ces[0].Fix, tc.fix)
		})
	}
}
