package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// tarExtractArgs is the command that ExtractTar runs on a host. GNU tar
// and busybox tar both take it: -p keeps the archived modes as they are
// (no umask), -o makes the login user own the files even when it is root.
func tarExtractArgs(dir string) []string {
	return []string{"tar", "-x", "-p", "-o", "-f", "-", "-C", dir}
}

// ExtractTar unpacks the tar stream r into dir, which must exist
// (relative to the login home unless absolute), with the host's own tar,
// through a command channel on the transport's connection. It returns
// once tar has exited, possibly before r is drained: the caller closes r.
//
// It exists for push: SFTP costs a handful of round trips per file, each
// waking sshd and sftp-server on the host, so the first push of 3,000
// small files to 8 hosts took twice as long as rsync; one stream per host
// costs none. A host whose tar cannot take the stream (none installed, a
// ForceCommand of internal-sftp) fails with an *ExitError in the chain,
// which tells the caller to send the files another way; any other error
// is the connection's.
func (f *sftpFS) ExtractTar(ctx context.Context, dir string, r io.Reader) error {
	stderr := NewTailBuffer(2 << 10)
	p, err := f.t.Start(ctx, Cmd{Args: tarExtractArgs(dir), Stdin: r, Stderr: stderr})
	if err != nil {
		return fmt.Errorf("extract into %s: %w", dir, err)
	}
	return tarErr(dir, p.Wait(), stderr)
}

// ExtractTar unpacks the tar stream r into dir with this machine's tar,
// as the SSH transport's FS does on a remote host, so that push behaves
// the same on both.
func (o osFS) ExtractTar(ctx context.Context, dir string, r io.Reader) error {
	stderr := NewTailBuffer(2 << 10)
	args := tarExtractArgs(o.abs(dir))
	c := exec.CommandContext(ctx, args[0], args[1:]...)
	c.Stderr = stderr
	// Not c.Stdin = r: Wait would wait for r to end, even once tar has
	// exited or been killed, as the SSH transport does not.
	stdin, err := c.StdinPipe()
	if err == nil {
		if err = c.Start(); err == nil {
			go func() {
				_, _ = io.Copy(stdin, r) // ends when tar exits: Wait closes stdin
				stdin.Close()
			}()
			err = c.Wait()
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("extract into %s: %w", dir, ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = exitError("localhost", ee)
	} else if err != nil {
		// No tar at all: as a remote shell would say, exit 127.
		err = fmt.Errorf("%w: %w", &ExitError{Host: "localhost", Code: 127}, err)
	}
	return tarErr(dir, err, stderr)
}

// tarErr adds what tar said on stderr to its failure.
func tarErr(dir string, err error, stderr *TailBuffer) error {
	if err == nil {
		return nil
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		return fmt.Errorf("extract into %s: %w: %s", dir, err, strings.ReplaceAll(msg, "\n", "; "))
	}
	return fmt.Errorf("extract into %s: %w", dir, err)
}

// TailBuffer keeps the last bytes written to it, up to a limit: enough of
// a failed command's stderr to say why, however much it printed. It is
// safe for concurrent use.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTailBuffer returns a TailBuffer that keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
