package container

import (
	"strings"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/plan"
)

// Step is one command a host runs, and what its output is for.
type Step struct {
	// Argv is the command.
	Argv []string
	// Kind says what the step does, and so how Prepare reads its output.
	Kind StepKind
}

// StepKind is what a Step is for.
type StepKind int

const (
	// ListOrphans lists, one id a line, the containers drover started in
	// the workdir; each is removed (RemoveArgv).
	ListOrphans StepKind = iota
	// HasImage succeeds when the host already has the image: the pull
	// after it is skipped.
	HasImage
	// Pull pulls the image.
	Pull
	// Load loads an archive and prints the image it loaded, which the
	// tag after it names as plan.ImageRef (LoadedImage, TagArgv).
	Load
)

// Steps are what a host runs before an attempt with c: the orphans of
// workdir (absolute, as the plan labels it) listed, and when image is
// set (the first attempt that reaches the host), the image loaded or
// looked for and pulled. apptainer has neither: its containers are plain
// processes of the agent's group, and it reads an image where it is.
func Steps(c config.Container, workdir string, image bool) []Step {
	rt := string(c.Runtime)
	if !c.Set() || c.Runtime == config.RuntimeApptainer {
		return nil
	}
	steps := []Step{{Argv: []string{rt, "ps", "-a", "-q", "--filter", plan.OrphanFilter(workdir)}, Kind: ListOrphans}}
	if !image {
		return steps
	}
	if p, ok := strings.CutPrefix(c.Image, config.ArchivePrefix); ok {
		return append(steps, Step{Argv: []string{rt, "load", "-i", p}, Kind: Load})
	}
	return append(steps,
		Step{Argv: []string{rt, "image", "inspect", "--format", "{{.Id}}", c.Image}, Kind: HasImage},
		Step{Argv: []string{rt, "pull", c.Image}, Kind: Pull})
}

// RemoveArgv removes the containers ids, running or not.
func RemoveArgv(c config.Container, ids []string) []string {
	return append([]string{string(c.Runtime), "rm", "-f"}, ids...)
}

// TagArgv names the image loaded from c's archive as the run commands
// call it (plan.ImageRef).
func TagArgv(c config.Container, loaded string) []string {
	return []string{string(c.Runtime), "tag", loaded, plan.ImageRef(c)}
}

// LoadedImage is the image a load printed it loaded: podman's and
// docker's "Loaded image: NAME" (the last, when there are several),
// podman's "Loaded image(s): NAME,..." or docker's "Loaded image ID:
// sha256:...". "" when the output names none.
func LoadedImage(out string) string {
	got := ""
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		for _, prefix := range []string{"Loaded image ID:", "Loaded image(s):", "Loaded image:"} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				names := strings.Split(strings.TrimSpace(rest), ",")
				got = strings.TrimSpace(names[len(names)-1])
				break
			}
		}
	}
	return got
}

// IDs are the container ids a ListOrphans step printed.
func IDs(out string) []string {
	return strings.Fields(out)
}
