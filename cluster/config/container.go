package config

import (
	"fmt"
	"strings"
)

// ContainerRuntime is the program that runs a job's container image
// (container.runtime).
type ContainerRuntime string

// The container runtimes drover knows how to drive.
const (
	RuntimeDocker    ContainerRuntime = "docker"
	RuntimePodman    ContainerRuntime = "podman"
	RuntimeApptainer ContainerRuntime = "apptainer"
)

// ArchivePrefix marks an image that is a file on each host, loaded
// (podman load, docker load) rather than pulled: "docker-archive:PATH".
const ArchivePrefix = "docker-archive:"

// Container is the job's container key: every process runs inside Image
// under Runtime (package plan wraps each command in the runtime's run
// command; docs/environments.md). The zero value is no container.
type Container struct {
	// Image is what the runtime runs: a reference it pulls
	// ("nvcr.io/nvidia/pytorch:24.05-py3"), an archive each host loads
	// ("docker-archive:/data/img.tar"), or for apptainer a .sif path or a
	// "docker://" URI.
	Image   string
	Runtime ContainerRuntime
	// Options are added to the run command before the image, as written
	// (e.g. ["--shm-size=16g"]).
	Options []string
}

// Set reports whether the job runs in a container.
func (c Container) Set() bool { return c.Image != "" }

// containerFields are the keys of [job.container].
var containerFields = []field{
	{"image", `image = "nvcr.io/nvidia/pytorch:24.05-py3"`},
	{"runtime", `runtime = "podman"`},
	{"options", `options = ["--shm-size=16g"]`},
}

var containerSchema = tableSchema{"[job.container]", containerFields}

// ownedOptions are the run options drover sets itself: a container's
// name and labels are how drover finds it again to remove it, so options
// may not change them.
var ownedOptions = []string{"--name", "--label", "-l", "--rm"}

// containerReader reads a job's container key: a concern of its own,
// beside jobReader's.
type containerReader struct{ *walker }

// read reads container = { image, runtime, options }.
func (w containerReader) read(jt tbl, j *Job) {
	if _, present := jt.m["container"]; !present {
		return
	}
	t, ok := w.table(jt, "container", containerSchema)
	if !ok {
		return
	}
	w.unknown(t)
	var c Container
	rt, hasRT := w.enum(t, "runtime", string(RuntimeDocker), string(RuntimePodman), string(RuntimeApptainer))
	if _, given := t.m["runtime"]; !given {
		w.missing(t, "runtime", "no runtime: drover does not guess which one the hosts have",
			`write runtime = "podman", "docker" or "apptainer"`)
	}
	c.Runtime = ContainerRuntime(rt)
	if img, ok := w.str(t, "image"); ok {
		c.Image = w.image(t, img)
	} else if _, given := t.m["image"]; !given {
		w.missing(t, "image", "no image to run the processes in", "write "+t.schema.example("image"))
	}
	if opts, ok := w.strList(t, "options"); ok {
		c.Options = w.options(t, opts)
	}
	if hasRT && c.Image != "" && !w.hasErrorAt(t.key("options")) {
		j.Container = c
	}
}

// image checks an image reference; "" when it is refused.
func (w containerReader) image(t tbl, img string) string {
	switch {
	case strings.TrimSpace(img) == "":
		w.add(t.key("image"), "is empty", "write "+t.schema.example("image"))
	case strings.ContainsAny(img, " \t\n\x00"):
		w.add(t.key("image"), fmt.Sprintf("%q contains white space", img), "write the image reference alone: "+t.schema.example("image"))
	case strings.HasPrefix(img, "-"):
		w.add(t.key("image"), fmt.Sprintf("%q starts with '-', which the runtime would read as an option", img),
			"put options in options = [...] and the image reference in image")
	case img == ArchivePrefix:
		w.add(t.key("image"), "names no archive", `write image = "docker-archive:/path/on/the/hosts/img.tar"`)
	default:
		return img
	}
	return ""
}

// options checks container.options: no NUL, and none of the options that
// name or label the container, which drover sets to find it again.
func (w containerReader) options(t tbl, opts []string) []string {
	for i, o := range opts {
		if strings.ContainsRune(o, 0) {
			w.add(t.key("options"), fmt.Sprintf("element %d contains a NUL byte", i+1), `remove the \u0000 from the element`)
			return nil
		}
		flag, _, _ := strings.Cut(o, "=")
		for _, owned := range ownedOptions {
			if flag == owned {
				w.add(t.key("options"), fmt.Sprintf("element %d (%q) is set by drover: it names, labels and removes each container itself, to find it again when a run ends", i+1, o),
					"remove "+fmt.Sprintf("%q", o)+" from options")
				return nil
			}
		}
	}
	return opts
}
