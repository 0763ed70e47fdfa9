package container

import (
	"reflect"
	"strings"
	"testing"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/plan"
)

func TestSteps(t *testing.T) {
	podman := config.Container{Image: "docker.io/library/busybox:1.36", Runtime: config.RuntimePodman}
	archive := config.Container{Image: "docker-archive:/data/img.tar", Runtime: config.RuntimeDocker}
	ps := func(rt string) Step {
		return Step{Argv: []string{rt, "ps", "-a", "-q", "--filter", "label=drover.workdir=/w"}, Kind: ListOrphans}
	}
	tests := []struct {
		name  string
		c     config.Container
		image bool
		want  []Step
	}{
		{"no container", config.Container{}, true, nil},
		{"apptainer", config.Container{Image: "/img.sif", Runtime: config.RuntimeApptainer}, true, nil},
		{"later attempt: orphans only", podman, false, []Step{ps("podman")}},
		{"registry image: looked for, then pulled", podman, true, []Step{ps("podman"),
			{Argv: []string{"podman", "image", "inspect", "--format", "{{.Id}}", podman.Image}, Kind: HasImage},
			{Argv: []string{"podman", "pull", podman.Image}, Kind: Pull}}},
		{"archive: loaded", archive, true, []Step{ps("docker"),
			{Argv: []string{"docker", "load", "-i", "/data/img.tar"}, Kind: Load}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Steps(tt.c, "/w", tt.image); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Steps = %v, want %v", got, tt.want)
			}
		})
	}
	if got := TagArgv(archive, "localhost/x:latest"); !reflect.DeepEqual(got, []string{"docker", "tag", "localhost/x:latest", plan.ImageRef(archive)}) {
		t.Errorf("TagArgv = %v", got)
	}
	if !strings.HasPrefix(plan.ImageRef(archive), "localhost/drover-archive:") {
		t.Errorf("ImageRef(archive) = %s", plan.ImageRef(archive))
	}
}

func TestLoadedImage(t *testing.T) {
	tests := []struct{ out, want string }{
		{"Getting image source signatures\nCopying blob 1234 done\nLoaded image: localhost/busybox:latest\n", "localhost/busybox:latest"},
		{"Loaded image(s): localhost/a:1,localhost/b:2\n", "localhost/b:2"},
		{"Loaded image ID: sha256:abcd\n", "sha256:abcd"},
		{"Loaded image: a:1\nLoaded image: b:2\n", "b:2"},
		{"nothing useful\n", ""},
	}
	for _, tt := range tests {
		if got := LoadedImage(tt.out); got != tt.want {
			t.Errorf("LoadedImage(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}
