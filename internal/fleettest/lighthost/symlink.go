package lighthost

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
)

// SFTP packet types the symlink fix reads and writes.
const (
	fxpMkdir   = 14
	fxpSetstat = 9
	fxpSymlink = 20
)

// maxPacket bounds one SFTP packet from a client (sftp-server allows 256 KiB).
const maxPacket = 256 << 10

// symlinkFix stands between the channel and pkg/sftp's server and does
// SSH_FXP_SYMLINK itself: that server joins a relative link target to its
// working directory, where sshd's sftp-server stores the target as given
// (which push relies on to keep a value in a link). Every other packet
// passes untouched. The symlink request is replaced by one that has no
// effect and gets the status the symlink got: a SETSTAT without attributes
// of the new link (success) or a MKDIR of "/" (failure).
type symlinkFix struct {
	r    io.Reader
	home string
	out  bytes.Buffer
}

func (s *symlinkFix) Read(p []byte) (int, error) {
	if s.out.Len() == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxPacket {
			return 0, fmt.Errorf("lighthost: sftp packet of %d bytes", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(s.r, body); err != nil {
			return 0, err
		}
		if len(body) >= 5 && body[0] == fxpSymlink {
			body = s.symlink(body)
		}
		binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
		s.out.Write(hdr[:])
		s.out.Write(body)
	}
	return s.out.Read(p)
}

// symlink carries out a SYMLINK packet (type, id, target, link: pkg/sftp's
// order, which is OpenSSH's) and returns its stand-in.
func (s *symlinkFix) symlink(body []byte) []byte {
	id := body[1:5]
	rest := body[5:]
	target, rest, ok1 := sftpString(rest)
	link, _, ok2 := sftpString(rest)
	if !ok1 || !ok2 {
		return body // malformed: let the server answer it
	}
	local := link
	if !path.IsAbs(local) {
		local = path.Join(s.home, local)
	}
	out := []byte{fxpSetstat}
	out = append(out, id...)
	if err := os.Symlink(target, local); err != nil {
		out = []byte{fxpMkdir}
		out = append(out, id...)
		out = appendString(out, "/")
		return append(out, 0, 0, 0, 0) // no attributes
	}
	out = appendString(out, local)
	return append(out, 0, 0, 0, 0)
}

func sftpString(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint32(len(b)-4) < n {
		return "", nil, false
	}
	return string(b[4 : 4+n]), b[4+n:], true
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
