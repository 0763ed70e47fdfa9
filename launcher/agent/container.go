package agent

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A command that runs a container (RunOptions.Container: podman's or
// docker's run command, as package plan writes it) is stopped and
// removed by the container's name, not only through the agent's group:
// SIGTERM to `podman run` is passed on to the container, but podman run
// exits at once without waiting for it, and docker's container is not
// even the agent's descendant (dockerd's). A graceful stop is therefore
// `RUNTIME stop -t GRACE NAME` (SIGTERM, SIGKILL after the grace, inside
// the container), the group's SIGKILL a little after the grace
// (ContainerStopSlack) stays the backstop, and whenever the agent ends, for whatever reason,
// `RUNTIME rm -f NAME` removes what is left. An agent killed outright
// cannot: the controller removes such orphans by their label before its
// next attempt (package container).

// ContainerStopSlack is how long past the grace the agent waits for the
// runtime's stop by name before it SIGKILLs the group itself (and the
// controller before it asks the agent to): the runtime, a program of its
// own that takes a second or more to start on a busy host, kills inside
// the container at the grace.
const ContainerStopSlack = 10 * time.Second

// containerRemoveWait bounds the removal of the container when the agent
// ends, and the wait past the grace for a stop by name.
const containerRemoveWait = 30 * time.Second

// containerCtl stops and removes one named container with the runtime,
// as helpers of the agent (never taken for the group's orphans).
type containerCtl struct {
	runtime, name string
	environ       []string
	h             *helpers
}

// newContainerCtl is the control of o's container; nil without one.
func newContainerCtl(o RunOptions, environ []string, h *helpers) *containerCtl {
	if o.Container == "" {
		return nil
	}
	rt := o.ContainerRuntime
	if rt == "" {
		rt = "podman"
	}
	return &containerCtl{runtime: rt, name: o.Container, environ: environ, h: h}
}

// stop stops the container by name: SIGTERM, SIGKILL after grace.
func (c *containerCtl) stop(grace time.Duration) error {
	secs := int((grace + time.Second - 1) / time.Second)
	return c.runtimeCmd(grace+containerRemoveWait, "stop", "-t", strconv.Itoa(secs), c.name)
}

// remove removes the container, running or not; one already gone (its
// --rm did it) is no error.
func (c *containerCtl) remove() error {
	err := c.runtimeCmd(containerRemoveWait, "rm", "-f", c.name)
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "no such container") {
		return nil
	}
	return err
}

// runtimeCmd runs the runtime with args, as a helper, within limit.
func (c *containerCtl) runtimeCmd(limit time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.runtime, args...)
	cmd.Env = c.environ
	var out bytes.Buffer // one writer for both: exec calls it from one goroutine
	cmd.Stdout, cmd.Stderr = &out, &out
	err := c.h.start(cmd)
	if err == nil {
		err = cmd.Wait()
		c.h.done(cmd.Process.Pid)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", c.runtime, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// stopContainer is a graceful stop of a container command: by name, and
// through the group (SIGTERM) only when the runtime could not (the
// container is not created yet, or the runtime fails).
func (s *supervision) stopContainer() {
	go func() {
		if err := s.ctr.stop(s.grace); err != nil {
			s.notice("stopping container %s by name failed (%v): signalling its group", s.ctr.name, err)
			s.g.signal(syscall.SIGTERM)
			s.g.signal(syscall.SIGCONT)
		}
	}()
}

// removeContainer removes the container as the agent ends.
func (s *supervision) removeContainer() {
	if s.ctr == nil {
		return
	}
	if err := s.ctr.remove(); err != nil {
		s.notice("removing container %s failed: %v", s.ctr.name, err)
	}
}
