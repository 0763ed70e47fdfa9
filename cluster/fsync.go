package cluster

import (
	"errors"
	"io"

	"github.com/pkg/sftp"
)

// sftpOpUnsupported is SSH_FX_OP_UNSUPPORTED (draft-ietf-secsh-filexfer-02).
const sftpOpUnsupported = 8

// Fsync flushes a file written through an FS (a Create's writer) to the
// host's disk, so that a rename made after it cannot leave a file whose
// data the kernel lost in a crash: a copy is renamed into place as the
// sign that it is whole. Writers that cannot sync (a buffer), and SFTP
// servers without OpenSSH's fsync@openssh.com extension, are left as
// they are: there is nothing more drover can do there.
func Fsync(w io.Writer) error {
	s, ok := w.(interface{ Sync() error })
	if !ok {
		return nil
	}
	err := s.Sync()
	var se *sftp.StatusError
	if errors.As(err, &se) && se.Code == sftpOpUnsupported {
		return nil
	}
	return err
}
