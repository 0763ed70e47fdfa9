package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
)

// CommandFS is an FS served by a command drover starts on the host over t
// (an SFTP server on the command's stdin and stdout), rather than by the
// transport's own file access. drover uses it where the serving process
// must differ from sshd's sftp-server: checkpoint copies run through
// `drover agent sftp --low-priority` (agent.SFTPCommand), whose CPU and
// I/O priority drover sets, so that they yield to training on the host.
//
// Close ends the command (its stdin closes, the server exits at end of
// input) and waits for it. Cancelling ctx, as for Transport.Start, closes
// the command's channel.
type CommandFS struct {
	FS
	proc   Process
	client *sftp.Client
	out    *io.PipeReader
	exited chan struct{}
	once   sync.Once
	err    error
}

// commandFSExit bounds how long Close waits for the server to exit after
// its input ends; past it the server is killed.
const commandFSExit = 5 * time.Second

// OpenCommandFS starts args on the host over t and speaks SFTP to it.
func OpenCommandFS(ctx context.Context, t Transport, args []string) (*CommandFS, error) {
	return OpenCommandFSWith(ctx, t, t.Start, args)
}

// Starter starts a command on a transport's host, as Transport.Start does.
type Starter func(ctx context.Context, c Cmd) (Process, error)

// OpenCommandFSWith is OpenCommandFS with the server started by start
// rather than t.Start: the Slurm transport starts it as a step of its own
// (unbuffered, outliving ctx) and t still runs ExtractTar's tar. Until
// the server answers, cancelling ctx stops it: a server that never starts
// (a step waiting for resources) does not hang the caller.
func OpenCommandFSWith(ctx context.Context, t Transport, start Starter, args []string) (*CommandFS, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := NewTailBuffer(2 << 10)
	proc, err := start(ctx, Cmd{Args: args, Stdin: inR, Stdout: outW, Stderr: stderr})
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s on %s for file access: %w", args[0], t.Host().Name, err)
	}
	exited := make(chan struct{})
	var werr error
	go func() {
		// The server exited (or its channel closed): the client's reads
		// end rather than wait for an answer that cannot come.
		werr = proc.Wait()
		outW.CloseWithError(errors.Join(io.EOF, werr))
		inR.Close()
		close(exited)
	}()
	c, err := sftpHandshake(ctx, outR, inW)
	if err != nil {
		inW.Close()
		outR.Close()
		_ = proc.Signal(syscall.SIGKILL)
		<-exited
		if werr != nil {
			err = fmt.Errorf("%w (server: %v)", err, werr)
		}
		return nil, fmt.Errorf("open sftp to %s on %s: %w (stderr: %q)", args[0], t.Host().Name, err, stderr.String())
	}
	return &CommandFS{FS: &sftpFS{c: c, t: t}, proc: proc, client: c, out: outR, exited: exited}, nil
}

// sftpHandshake opens the SFTP client over the server's pipes, giving up when
// ctx ends.
func sftpHandshake(ctx context.Context, r io.Reader, w io.WriteCloser) (*sftp.Client, error) {
	type result struct {
		c   *sftp.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := sftp.NewClientPipe(r, w, SFTPClientOptions()...)
		ch <- result{c, err}
	}()
	select {
	case res := <-ch:
		return res.c, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.c != nil {
				res.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Close ends the server and waits for it to exit.
func (f *CommandFS) Close() error {
	f.once.Do(func() {
		f.err = f.client.Close() // closes the server's stdin
		select {
		case <-f.exited:
		case <-time.After(commandFSExit):
			// Killed, and waited for (bounded) so that nothing is
			// left running when Close returns.
			_ = f.proc.Signal(syscall.SIGKILL)
			select {
			case <-f.exited:
			case <-time.After(commandFSExit):
			}
		}
		f.out.Close()
	})
	return f.err
}
