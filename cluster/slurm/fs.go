package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/droverhq/drover/cluster"
)

// Dial returns the transport to node h once it knows whether the node sees
// this machine's files: a marker written here, in the home's and the
// workdir's .drover directories, must be there for a step on the node. A
// node that sees them (the usual Slurm setup: home and workdir on a shared
// filesystem) gets file access through this machine's filesystem, and the
// launcher pushes once for all such nodes, or not at all. One that does
// not gets its own files over SFTP through a step (remoteFS), and the code
// is pushed to it as over SSH: nodes of an allocation need not be
// reachable over SSH, so srun is the only way in.
func Dial(ctx context.Context, h cluster.Endpoint, o Options) (cluster.Transport, error) {
	tr, err := New(h, o)
	if err != nil {
		return nil, err
	}
	t := tr.(*transport)
	shared, err := t.sharesFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to %s (slurm, job %s): %w", h.Name, o.JobID, err)
	}
	t.remote = !shared
	return t, nil
}

// checkDirs are the directories a node must see for this machine's
// filesystem to be its own: the home (the agent, relative paths) and the
// workdir (code, checkpoints), when it is another directory.
func (t *transport) checkDirs() []string {
	dirs := []string{filepath.Clean(t.opts.Home)}
	if t.host.Workdir != "" {
		if wd := filepath.Clean(t.dir(t.host.Workdir)); wd != dirs[0] {
			dirs = append(dirs, wd)
		}
	}
	return dirs
}

// sharesFS writes a marker into each checkDirs' .drover here and asks a
// step on the node whether it finds them all. The markers are removed
// again; the .drover directories stay (the workdir's holds drover's state
// on this machine anyway). A failed test is an answer (not shared); a step
// that could not run is an error.
func (t *transport) sharesFS(ctx context.Context) (bool, error) {
	var markers []string
	defer func() {
		for _, m := range markers {
			os.Remove(m)
		}
	}()
	args := []string{"test"}
	for _, d := range t.checkDirs() {
		dir := filepath.Join(d, ".drover")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("check that the node sees %s: %w", d, err)
		}
		f, err := os.CreateTemp(dir, "shared-check-")
		if err != nil {
			return false, fmt.Errorf("check that the node sees %s: %w", d, err)
		}
		f.Close()
		if len(markers) > 0 {
			args = append(args, "-a")
		}
		markers = append(markers, f.Name())
		args = append(args, "-f", f.Name())
	}
	// test prints nothing; a node that prints (a noisy prolog) is kept
	// to a bound, and quoted escaped.
	out := cluster.NewHeadBuffer(cluster.QuoteLimit, nil)
	// In "/": a node without the home at all is a node that does not
	// share it, not a step that cannot start.
	p, err := t.Start(ctx, cluster.Cmd{Args: args, Dir: "/", Stdout: out, Stderr: out})
	if err == nil {
		err = p.Wait()
	}
	var ee *cluster.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.Code == 1 && ee.Signal == "":
		return false, nil
	}
	if msg := strings.TrimSpace(out.Quote(cluster.QuoteLimit)); msg != "" {
		err = fmt.Errorf("%w: %s", err, msg)
	}
	return false, fmt.Errorf("check whether the node sees %s: %w", strings.Join(t.checkDirs(), " and "), err)
}

// sftpServerScript starts OpenSSH's sftp-server, wherever the node's
// distribution keeps it, on the step's stdin and stdout.
const sftpServerScript = `for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do if [ -x "$p" ]; then exec "$p"; fi; done; echo "no sftp-server (OpenSSH's) on this node" >&2; exit 127`

// remoteFS opens the file access of a node that does not share this
// machine's filesystem: OpenSSH's sftp-server in a step on the node,
// speaking SFTP over the step's stdin and stdout (cluster.CommandFS, the
// SFTP FS the SSH transport uses). Push, agent install and checkpoint
// discovery then work on the node exactly as over SSH, tar streams
// included (ExtractTar starts tar in a step of its own). The step serves
// every later call, so it outlives ctx; Close stops it, and nothing is
// left running on the node.
func (t *transport) remoteFS(ctx context.Context) (cluster.FS, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fs != nil {
		return t.fs.FS, nil // the SFTP FS itself, with its optional methods (ExtractTar)
	}
	if t.closed {
		return nil, fmt.Errorf("open file access on %s (slurm): transport closed", t.host.Name)
	}
	// --unbuffered: without it slurmstepd passes on whole lines only,
	// and an SFTP exchange waits forever.
	step := func(ctx context.Context, c cluster.Cmd) (cluster.Process, error) {
		return t.start(context.WithoutCancel(ctx), c, true)
	}
	f, err := cluster.OpenCommandFSWith(ctx, t, step, []string{"/bin/sh", "-c", sftpServerScript})
	if err != nil {
		return nil, fmt.Errorf("open file access on %s (slurm, job %s) through sftp-server in a step: %w", t.host.Name, t.opts.JobID, err)
	}
	t.fs = f
	return f.FS, nil
}
