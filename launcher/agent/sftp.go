package agent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pkg/sftp"
)

// SFTPCommand returns the argv of `drover agent sftp --low-priority`: an
// SFTP server on the agent's stdin and stdout, started by drover over the
// transport for copying checkpoints. It runs at the lowest CPU priority
// (nice 19) and in the idle I/O class, so that reading a checkpoint on the
// host that wrote it and writing drover's copy on another yield to
// training there. sshd's own sftp-server (which push and the checkpoint
// listing use) cannot be reniced from the controller: drover does not know
// its pid, and its path differs between distributions.
func SFTPCommand(binary string) []string {
	return []string{binary, cmdAgent, cmdSFTP, "--" + flagLowPriority}
}

// niceLowest is the nice value of a low-priority agent: the lowest
// priority there is.
const niceLowest = 19

// lowPriorityEnv marks the agent that lowered its priority and executed
// itself again (see LowerPriority), so that it does not do so twice.
const lowPriorityEnv = "DROVER_AGENT_LOW_PRIORITY"

// LowerPriority gives the calling process nice 19 and, where the kernel
// has I/O priorities (Linux), the idle I/O class. Both are per thread on
// Linux and a Go process already runs several threads, so it sets them on
// the calling thread and executes the binary again from it: the new
// process starts with them, and every thread it creates inherits them.
// It returns only on failure, or at once in the executed process.
func LowerPriority() error {
	if os.Getenv(lowPriorityEnv) == "1" {
		return nil
	}
	if err := os.Setenv(lowPriorityEnv, "1"); err != nil {
		return err
	}
	return lowerAndReexec()
}

// ServeSFTP serves SFTP on r and w until the client closes its end (end of
// input), relative paths resolving against the working directory, which
// the transport makes the login home.
func ServeSFTP(r io.Reader, w io.WriteCloser) error {
	srv, err := sftp.NewServer(stdio{r, w})
	if err != nil {
		return fmt.Errorf("start sftp server: %w", err)
	}
	err = srv.Serve()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if cerr := srv.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sftp server: %w", err)
	}
	return nil
}

type stdio struct {
	io.Reader
	io.WriteCloser
}
