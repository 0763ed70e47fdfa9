//go:build unix

package cluster

import (
	"io/fs"
	"syscall"
)

// FreeSpace is sftpFS.FreeSpace on this machine.
func (o osFS) FreeSpace(p string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(o.abs(p), &st); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: p, Err: err}
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // Bsize is uint32 on darwin
}
