package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
)

// agentDir is where Install puts drover binaries, under the login home.
const agentDir = ".drover/bin"

// CannotRunError is Install's error when the uploaded agent does not run
// on the host: Output is what the host said (the loader's message, such as
// "exec format error" or a missing GLIBC version), or the version it
// answered when that is not the expected one.
type CannotRunError struct {
	Host     string
	Platform Platform // the host's, by its uname
	Agent    string   // the local binary that was uploaded
	Remote   string   // where it is on the host
	Output   string
	Err      error
}

func (e *CannotRunError) Error() string {
	msg := fmt.Sprintf("the drover agent for %s (%s) does not run on %s", e.Platform, e.Agent, e.Host)
	if e.Output != "" {
		msg += ": " + e.Output
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *CannotRunError) Unwrap() error { return e.Err }

// Install makes the agent for t's host available there and returns its
// absolute path on the host. For a local host the running drover is used
// where it is. See the package doc for the steps and their guarantees.
//
// dirs, relative to the home unless absolute, are created (mkdir -p) by
// the command that reads the host's state, which runs anyway: `drover
// run` passes its workdir's state directory, so that the workdir lease
// taken beside the install finds it there and costs one request instead
// of one per missing directory. What fails to be created is left for
// its user to create (and report).
func Install(ctx context.Context, t cluster.Transport, agents Agents, dirs ...string) (remotePath string, err error) {
	h := t.Host()
	if h.Transport == config.TransportLocal {
		abs, err := filepath.Abs(agents.Self)
		if err != nil {
			return "", fmt.Errorf("install drover agent on %s: %w", h.Name, err)
		}
		return abs, nil
	}
	fail := func(what string, err error) (string, error) {
		return "", fmt.Errorf("install drover agent on %s (%s): %s: %w", h.Name, h.Address, what, err)
	}
	// File access and the home do not depend on the platform: they are
	// asked for beside the host's state (platform, agents there), so that
	// every install waits for the longer of the two rather than their sum.
	files := make(chan homeFS, 1)
	go func() { files <- openHome(ctx, t) }()
	st, err := readHostState(ctx, t, agents, dirs)
	if err != nil {
		return fail("find the host's platform", err)
	}
	plat := st.platform
	bin, err := agents.For(h.Name, plat)
	if err != nil {
		return fail("choose an agent", err)
	}
	want, sum := bin.Version, bin.Sum
	hf := <-files
	if hf.err != nil {
		return fail(hf.what, hf.err)
	}
	rfs, home := hf.fs, hf.home
	name := "drover-" + sum[:12]
	dir := path.Join(home, agentDir)
	dst := path.Join(dir, name)
	if st.versions[name] == want {
		return dst, nil
	}
	// Not there, or another build under this name (or a damaged file):
	// upload and replace it. The state command created dir.
	tmp := path.Join(dir, ".drover-"+sum[:12]+".tmp-"+randomSuffix())
	if err := uploadAndCheck(ctx, t, h.Name, plat, bin.Path, tmp, want); err != nil {
		_ = rfs.Remove(tmp)
		var ue *uploadError
		if errors.As(err, &ue) {
			return fail("upload to "+tmp, ue.err)
		}
		return "", fmt.Errorf("install drover agent on %s (%s): %w", h.Name, h.Address, err)
	}
	if err := rfs.Rename(tmp, dst); err != nil {
		_ = rfs.Remove(tmp)
		return fail("rename into "+dst, err)
	}
	return dst, nil
}

// homeFS is a host's file access and home directory, or why there are none.
type homeFS struct {
	fs   cluster.FS
	home string
	what string // the step that failed
	err  error
}

func openHome(ctx context.Context, t cluster.Transport) homeFS {
	rfs, err := t.FS(ctx)
	if err != nil {
		return homeFS{what: "open file access", err: err}
	}
	home, err := rfs.Home()
	if err != nil {
		return homeFS{what: "find home directory", err: err}
	}
	return homeFS{fs: rfs, home: home}
}

// hostState is what one command told of a host before an install: its
// platform, and the version each agent already there answers, by file
// name.
type hostState struct {
	platform Platform
	versions map[string]string
}

// stateScript prints `uname -sm`, creates the agent directory ($1,
// relative to the home) and the $2 directories after it, and, for each
// candidate agent (then: file name and size) there with that size, "have
// NAME VERSION" with what it answers to `agent version`: everything an
// install needs to know in one exchange with the host.
const stateScript = `uname -sm
dir=$1
n=$2
shift 2
mkdir -p "$dir" 2>/dev/null
while [ "$n" -gt 0 ]; do
	mkdir -p -- "$1" 2>/dev/null
	shift
	n=$((n - 1))
done
while [ $# -ge 2 ]; do
	f=$dir/$1
	if [ -f "$f" ] && [ -x "$f" ] && [ "$(wc -c <"$f")" -eq "$2" ]; then
		v=$("$f" agent version 2>/dev/null) && printf 'have %s %s\n' "$1" "$v"
	fi
	shift 2
done
exit 0`

// readHostState runs stateScript for every agent agents can offer,
// creating dirs too.
func readHostState(ctx context.Context, t cluster.Transport, agents Agents, dirs []string) (hostState, error) {
	args := []string{"sh", "-c", stateScript, "sh", agentDir, strconv.Itoa(len(dirs))}
	args = append(args, dirs...)
	for _, b := range agents.candidates() {
		args = append(args, "drover-"+b.Sum[:12], strconv.FormatInt(b.Size, 10))
	}
	out, err := output(ctx, t, args...)
	if err != nil {
		return hostState{}, fmt.Errorf("uname -sm: %w", err)
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	p, ok := unamePlatform(strings.TrimSpace(first))
	if !ok {
		return hostState{}, fmt.Errorf("uname -sm printed %q, want an OS and a machine", strings.TrimSpace(first))
	}
	st := hostState{platform: p, versions: map[string]string{}}
	for _, l := range strings.Split(rest, "\n") {
		if have, ok := strings.CutPrefix(l, "have "); ok {
			name, version, _ := strings.Cut(have, " ")
			st.versions[name] = version
		}
	}
	return st, nil
}

// uploadScript writes its stdin to $1, makes it executable and runs "$@"
// (the agent's version command): the upload and its check in one command.
// A failed write exits uploadFailed, so that a full disk is not taken for
// an agent that does not run.
const uploadScript = `cat >"$1" || exit 97
chmod 755 "$1" || exit 97
exec "$@"`

// uploadFailed is uploadScript's exit status when the file could not be
// written.
const uploadFailed = 97

// uploadError is an upload that did not arrive (as opposed to an agent
// that arrived and does not run).
type uploadError struct{ err error }

func (e *uploadError) Error() string { return e.err.Error() }
func (e *uploadError) Unwrap() error { return e.err }

// uploadAndCheck sends local to remote on a command's stdin, makes it
// executable and runs `remote agent version` there (uploadScript), and
// compares its answer with want. The agent goes over a channel of its
// own rather than the SFTP session: the host's sftp-server answers in
// order, and an agent of several MiB in its channel's window made every
// request the run sent beside it (the workdir lease, a first push) wait a
// round trip more each. One command also saves the round trips of opening,
// closing and checking the file separately.
func uploadAndCheck(ctx context.Context, t cluster.Transport, host string, plat Platform, local, remote, want string) error {
	f, err := os.Open(local)
	if err != nil {
		return &uploadError{err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return &uploadError{err}
	}
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout(fi.Size()))
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := append([]string{"sh", "-c", uploadScript, "sh"}, agent.VersionCommand(remote)...)
	p, err := t.Start(ctx, cluster.Cmd{Args: args, Stdin: &ctxReader{ctx: ctx, r: f}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return &uploadError{fmt.Errorf("start sh: %w", err)}
	}
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		return &uploadError{ctx.Err()}
	}
	got := strings.TrimSpace(stdout.String())
	var ee *cluster.ExitError
	switch {
	case errors.As(err, &ee) && ee.Code == uploadFailed:
		msg := firstLine(stderr.Bytes())
		if msg == "" {
			msg = "the host could not write it"
		}
		return &uploadError{fmt.Errorf("%w: %s", err, msg)}
	case err != nil:
		if msg := firstLine(stderr.Bytes()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return &CannotRunError{Host: host, Platform: plat, Agent: local, Remote: remote, Err: err}
	case got != want:
		return &CannotRunError{Host: host, Platform: plat, Agent: local, Remote: remote,
			Output: fmt.Sprintf("it answers %q, want %q", got, want)}
	}
	return nil
}

// uploadTimeout bounds an upload: a step's time plus a minute per MiB,
// so that only a link stalled for good (under 17 KiB/s) gives up on it.
func uploadTimeout(size int64) time.Duration {
	return stepTimeout + time.Duration(size/(1<<20))*time.Minute
}

// ctxReader stops an upload when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// randomSuffix makes temporary names unique across concurrent installs.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
