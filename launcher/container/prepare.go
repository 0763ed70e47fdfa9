package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// Host is one host Prepare readies.
type Host struct {
	Name string
	T    cluster.Transport
	// Workdir is the job's workdir there, absolute: the orphans removed
	// are those labelled with it.
	Workdir string
	// Image says the image is loaded or pulled there (the run's first
	// attempt on the host); without it only orphans are removed.
	Image bool
}

// Error is a host that could not be readied: what was being done, to
// which image, and the runtime's own last words.
type Error struct {
	Host, Image string
	// Doing is the step that failed ("pull", "load /data/img.tar",
	// "remove the containers left in /w").
	Doing  string
	Output string
	Err    error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("container on %s: %s", e.Host, e.Doing)
	if e.Image != "" {
		msg += " of image " + e.Image
	}
	msg += fmt.Sprintf(": %v", e.Err)
	if out := lastLines(e.Output, 5); out != "" {
		msg += "\n" + out
	}
	return msg + "\n(check that the image exists and that the login user can run the runtime on the host: docs/environments.md, Containers)"
}

func (e *Error) Unwrap() error { return e.Err }

// Prepare readies every host at once (see Steps) and returns each
// host's error, nil where it is ready; note, when set, hears what each
// host does that takes time (a pull, a load) and how long it took.
func Prepare(ctx context.Context, c config.Container, hosts []Host, note func(host, msg string)) []error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = prepare(ctx, c, h, note)
		}()
	}
	wg.Wait()
	return errs
}

// prepare runs h's steps in order.
func prepare(ctx context.Context, c config.Container, h Host, note func(host, msg string)) error {
	say := func(format string, args ...any) {
		if note != nil {
			note(h.Name, fmt.Sprintf(format, args...))
		}
	}
	fail := func(doing, image, out string, err error) error {
		return &Error{Host: h.Name, Image: image, Doing: doing, Output: out, Err: err}
	}
	for _, s := range Steps(c, h.Workdir, h.Image) {
		start := time.Now()
		out, err := output(ctx, h.T, s.Argv)
		switch s.Kind {
		case ListOrphans:
			if err != nil {
				return fail("list the containers left in "+h.Workdir, "", out.all, err)
			}
			if ids := IDs(out.stdout); len(ids) > 0 {
				if rout, err := output(ctx, h.T, RemoveArgv(c, ids)); err != nil {
					return fail("remove the containers left in "+h.Workdir, "", rout.all, err)
				}
				say("removed %d container(s) an earlier agent left in %s", len(ids), h.Workdir)
			}
		case HasImage:
			if err == nil {
				return nil // no pull: the host has it
			}
			say("pulling image %s", c.Image)
		case Pull:
			if err != nil {
				return fail("pull", c.Image, out.all, err)
			}
			say("pulled image %s in %s", c.Image, time.Since(start).Round(time.Millisecond))
		case Load:
			if err != nil {
				return fail("load", c.Image, out.all, err)
			}
			loaded := LoadedImage(out.stdout)
			if loaded == "" {
				return fail("load", c.Image, out.all, errors.New("the runtime did not say which image it loaded"))
			}
			if tout, err := output(ctx, h.T, TagArgv(c, loaded)); err != nil {
				return fail("tag "+loaded, c.Image, tout.all, err)
			}
			say("loaded image %s in %s", c.Image, time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// result is a command's output: stdout, which the steps read, and both
// streams together, which an error shows (podman warns on stderr).
type result struct {
	stdout, all string
}

// output runs argv on t; a command cut short by ctx is signalled first,
// so that none runs on after the caller gave up on it.
func output(ctx context.Context, t cluster.Transport, argv []string) (result, error) {
	// A host's output is bounded: what the steps read of stdout (image
	// names, container ids) and the end of both streams for an error.
	stdout, all := cluster.NewHeadBuffer(outputLimit, nil), cluster.NewTailBuffer(outputLimit)
	p, err := t.Start(ctx, cluster.Cmd{Args: argv, Stdout: io.MultiWriter(stdout, all), Stderr: all})
	if err != nil {
		return result{}, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = p.Signal(syscall.SIGTERM)
		<-done
		err = ctx.Err()
	}
	res := result{stdout: string(stdout.Bytes()), all: all.String()}
	if err != nil {
		return res, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return res, nil
}

// outputLimit bounds what drover keeps of a runtime command's output on a
// host (each of stdout's head and both streams' tail).
const outputLimit = 1 << 20

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
