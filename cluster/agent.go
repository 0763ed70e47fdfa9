package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// ErrAgentUnsupported is wrapped by InstallAgent's error when a host's OS or
// CPU differs from the drover binary's, so that the caller can say "this
// host needs a drover built for it" instead of failing obscurely later.
var ErrAgentUnsupported = errors.New("host platform differs from this drover binary's")

// agentDir is where InstallAgent puts drover binaries, under the login home.
const agentDir = ".drover/bin"

// InstallAgent makes the drover binary at localBinary available on the host
// that t reaches and returns its absolute path there. Binaries are named by
// content (drover-<12 hex of sha256>), so several drover versions coexist and
// a host that already has this one gets nothing uploaded; an upload goes to a
// temporary name first and is renamed into place, so a concurrent drover or
// an interrupted copy never leaves a half binary under the final name. For a
// local host the binary is used where it is.
func InstallAgent(ctx context.Context, t Transport, localBinary string) (remotePath string, err error) {
	h := t.Host()
	if h.Transport == config.TransportLocal {
		abs, err := filepath.Abs(localBinary)
		if err != nil {
			return "", fmt.Errorf("install drover agent on %s: %w", h.Name, err)
		}
		return abs, nil
	}
	fail := func(what string, err error) (string, error) {
		return "", fmt.Errorf("install drover agent on %s (%s): %s: %w", h.Name, h.Address, what, err)
	}

	if err := checkPlatform(ctx, t); err != nil {
		return fail("check platform", err)
	}

	f, err := os.Open(localBinary)
	if err != nil {
		return fail("read local binary", err)
	}
	defer f.Close()
	sum := sha256.New()
	size, err := io.Copy(sum, f)
	if err != nil {
		return fail("hash "+localBinary, err)
	}
	name := "drover-" + hex.EncodeToString(sum.Sum(nil))[:12]

	rfs, err := t.FS(ctx)
	if err != nil {
		return fail("open file access", err)
	}
	home, err := rfs.Home()
	if err != nil {
		return fail("find home directory", err)
	}
	dir := path.Join(home, agentDir)
	dst := path.Join(dir, name)
	if fi, err := rfs.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		return dst, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail("stat "+dst, err)
	}

	if err := rfs.MkdirAll(dir, 0o755); err != nil {
		return fail("create "+dir, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail("read local binary", err)
	}
	tmp := path.Join(dir, "."+name+".tmp-"+randomSuffix())
	w, err := rfs.Create(tmp)
	if err != nil {
		return fail("create "+tmp, err)
	}
	_, cerr := io.Copy(w, ctxReader{ctx, f})
	if err := errors.Join(cerr, w.Close()); err != nil {
		_ = rfs.Remove(tmp)
		return fail("upload to "+tmp, err)
	}
	if err := rfs.Chmod(tmp, 0o755); err != nil {
		_ = rfs.Remove(tmp)
		return fail("chmod "+tmp, err)
	}
	if err := rfs.Rename(tmp, dst); err != nil {
		_ = rfs.Remove(tmp)
		return fail("rename into "+dst, err)
	}
	return dst, nil
}

// checkPlatform compares `uname -sm` on the host with this binary's
// GOOS/GOARCH.
func checkPlatform(ctx context.Context, t Transport) error {
	var out, errOut bytes.Buffer
	p, err := t.Start(ctx, Cmd{Args: []string{"uname", "-sm"}, Stdout: &out, Stderr: &errOut})
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return fmt.Errorf("uname -sm: %w: %s", err, msg)
		}
		return fmt.Errorf("uname -sm: %w", err)
	}
	goos, goarch, ok := unamePlatform(out.String())
	if !ok {
		return fmt.Errorf("uname -sm printed %q: %w", strings.TrimSpace(out.String()), ErrAgentUnsupported)
	}
	if goos != runtime.GOOS || goarch != runtime.GOARCH {
		return fmt.Errorf("host is %s/%s, this drover is %s/%s: %w", goos, goarch, runtime.GOOS, runtime.GOARCH, ErrAgentUnsupported)
	}
	return nil
}

// unamePlatform maps `uname -sm` output ("Linux x86_64") to Go's names.
func unamePlatform(s string) (goos, goarch string, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return "", "", false
	}
	goos = strings.ToLower(f[0])
	switch f[1] {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64", "aarch64_be":
		goarch = "arm64"
	case "i386", "i486", "i586", "i686", "i86pc":
		goarch = "386"
	case "armv6l", "armv7l", "armv8l", "arm":
		goarch = "arm"
	case "ppc64le", "ppc64", "s390x", "riscv64", "mips64", "mips64le", "loong64":
		goarch = f[1]
	default:
		goarch = strings.ToLower(f[1])
	}
	return goos, goarch, true
}

// randomSuffix makes temporary names unique across concurrent installs.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
