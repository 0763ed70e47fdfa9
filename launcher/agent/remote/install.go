package remote

import (
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
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
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
	in, err := InstallWith(ctx, t, agents, InstallOptions{Dirs: dirs})
	return in.Path, err
}

// InstallOptions are Install's extras.
type InstallOptions struct {
	// Dirs are created on the host (see Install).
	Dirs []string
	// Told, when set, is called once the host has said its home
	// directory and which of Dirs it did not have (they are created now),
	// before the agent's upload, if any, is done: `drover run` tells its
	// first push that a workdir is new (the push then has nothing to
	// compare), and needs no SFTP request of its own for the home.
	Told func(home string, made []string)
}

// Installed is where Install put the agent, and which of the directories
// it was asked for were not there before.
type Installed struct {
	Path string
	Made []string
}

// InstallWith is Install with options. Reading the host's state,
// uploading and checking the agent and moving it into place are one
// command (installScript): a fresh host costs one command's round trips
// and the upload, a host that has the agent one command.
func InstallWith(ctx context.Context, t cluster.Transport, agents Agents, o InstallOptions) (Installed, error) {
	h := t.Host()
	if h.Transport == config.TransportLocal {
		abs, err := filepath.Abs(agents.Self)
		if err != nil {
			return Installed{}, fmt.Errorf("install drover agent on %s: %w", h.Name, err)
		}
		return Installed{Path: abs}, nil
	}
	fail := func(what string, err error) (Installed, error) {
		if what != "" {
			what += ": "
		}
		return Installed{}, fmt.Errorf("install drover agent on %s (%s): %s%w", h.Name, h.Address, what, err)
	}
	s, err := startInstall(ctx, t, agents, o.Dirs)
	if err != nil {
		return fail("find the host's platform", err)
	}
	defer s.stop()
	st, err := s.state()
	if err != nil {
		return fail("find the host's platform", err)
	}
	if o.Told != nil && st.home != "" {
		o.Told(st.home, st.made)
	}
	bin, err := agents.For(h.Name, st.platform)
	if err != nil {
		return fail("choose an agent", err)
	}
	if st.home == "" {
		return fail("find the home directory", s.failed("no home directory printed"))
	}
	name := "drover-" + bin.Sum[:12]
	in := Installed{Path: path.Join(st.home, agentDir, name), Made: st.made}
	if st.versions[name] == bin.Version {
		return in, s.skip(name)
	}
	// Not there, or another build under this name (or a damaged file):
	// upload and replace it.
	tmp := ".drover-" + bin.Sum[:12] + ".tmp-" + randomSuffix()
	remoteTmp := path.Join(st.home, agentDir, tmp)
	if err := s.upload(bin, st.platform, name, tmp, remoteTmp); err != nil {
		var ue *uploadError
		if errors.As(err, &ue) {
			return fail("upload to "+remoteTmp, ue.err)
		}
		return fail("", err)
	}
	return in, nil
}

// hostState is what the install command told of a host before an upload:
// its platform and home, the version each agent already there answers, by
// file name, and which of the directories asked for it made.
type hostState struct {
	platform Platform
	home     string
	versions map[string]string
	made     []string
}

// installScript is the whole install in one command. It prints
// cluster.LoginMarker first (what comes before it is the login shell's),
// "missing CMD..." and "path PATH" when the login PATH lacks a command it
// needs, then `uname -sm`, "home DIR" (resolved, as SFTP's realpath says it), creates the agent directory ($1, relative to the home)
// and the $2 directories after it ("made DIR" for each that was not
// there; a workdir's .drover is made the login user's only, as what goes
// in it, logs and tracebacks, is), and, for each candidate agent (then: file name and size) there
// with that size, "have NAME VERSION" with what it answers to `agent
// version`; then "ready", and reads a line from drover. "skip NAME" (or
// nothing) ends it there. "NAME TMP VERSION" is followed by the agent
// itself: it is written to TMP, run (`agent version`), and moved to NAME
// only if it answers VERSION. Exit statuses: uploadFailed (the file
// could not be written; why on stderr), cannotRun (it does not run; what
// it printed on stdout after "ready"), otherVersion (it answers another
// version, printed the same way).
//
// Nothing of an upload stays behind for good: one cut by a signal
// (the session closed, drover interrupted) removes its temporary file,
// and every install removes those older than an hour (a SIGKILL, a host
// that went down mid-upload). Old agents are pruned: every install marks
// the one it uses as used (its access time) and removes the others that
// no install used for 30 days, so a host does not keep every drover
// version it ever ran, while another drover version that still uses the
// host keeps its own. `read` takes one byte at a time from a
// pipe, so the agent's bytes are left for cat.
const installScript = `echo ` + cluster.LoginMarker + `
cd || exit 1
m=
for c in uname mkdir wc cat chmod mv rm; do command -v "$c" >/dev/null 2>&1 || m="$m $c"; done
[ -z "$m" ] || { printf 'missing%s\npath %s\n' "$m" "$PATH"; exit 96; }
uname -sm
printf 'home %s\n' "$(pwd -P)"
dir=$1
n=$2
shift 2
mkdir -p "$dir" 2>/dev/null
while [ "$n" -gt 0 ]; do
	[ -d "$1" ] || printf 'made %s\n' "$1"
	mkdir -p -- "$1" 2>/dev/null
	case $1 in .drover | */.drover) chmod 700 -- "$1" 2>/dev/null ;; esac
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
find "$dir" -maxdepth 1 -type f -name '.drover-*.tmp-*' -mmin +60 -exec rm -f {} + 2>/dev/null
prune() {
	touch -a "$dir/$1" 2>/dev/null
	find "$dir" -maxdepth 1 -type f -name 'drover-????????????' ! -name "$1" -atime +30 -exec rm -f {} + 2>/dev/null
	return 0
}
echo ready
IFS=' ' read -r name tmp want || exit 0
[ "$name" = skip ] && { [ -z "$tmp" ] || prune "$tmp"; exit 0; }
tmp=$dir/$tmp
trap 'rm -f "$tmp"; exit 97' HUP INT TERM PIPE
cat >"$tmp" && chmod 755 "$tmp" || { rm -f "$tmp"; exit 97; }
out=$("$tmp" agent version 2>&1) || { rm -f "$tmp"; printf '%s\n' "$out"; exit 98; }
[ "$out" = "$want" ] || { rm -f "$tmp"; printf '%s\n' "$out"; exit 99; }
mv -f "$tmp" "$dir/$name" || { rm -f "$tmp"; exit 97; }
trap - HUP INT TERM PIPE
prune "$name"`

// installScript's exit statuses.
const (
	uploadFailed = 97
	cannotRun    = 98
	otherVersion = 99
)

// uploadError is an upload that did not arrive (as opposed to an agent
// that arrived and does not run).
type uploadError struct{ err error }

func (e *uploadError) Error() string { return e.err.Error() }
func (e *uploadError) Unwrap() error { return e.err }

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
