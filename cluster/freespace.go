package cluster

// FreeSpace reports the bytes available to the login user on the host's
// filesystem holding p (statvfs's f_bavail; over SFTP the OpenSSH
// statvfs@openssh.com extension). It exists for push's errors: SFTP
// reports a full disk as a bare "Failure", which says nothing of why, and
// push says instead "no space left on HOST (free: X)".
func (f *sftpFS) FreeSpace(p string) (int64, error) {
	st, err := f.c.StatVFS(f.abs(p))
	if err != nil {
		return 0, pathErr("statvfs", p, err)
	}
	return int64(st.Frsize * st.Bavail), nil
}
