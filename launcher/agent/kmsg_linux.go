package agent

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// kmsgMax bounds what one read of /dev/kmsg keeps: only Xid records are
// kept, and a kernel that logs more than this many of them has been
// judged by the first.
const kmsgMax = 1 << 20

// readKmsg reads every record /dev/kmsg holds (one per read, EAGAIN at
// the end) and keeps those of the NVIDIA driver's Xids.
func readKmsg() ([]byte, error) {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readKmsgFD(fd)
}

// readKmsgFD reads the records of fd, a non-blocking /dev/kmsg (or,
// under test, anything that hands out one record a read), and keeps the
// first line of each the kernel itself logged as an Xid (kmsgXIDRecord).
func readKmsgFD(fd int) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 8192)
	for out.Len() < kmsgMax {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return out.Bytes(), nil
		case errors.Is(err, unix.EPIPE):
			continue // overwritten while we read: the next one follows
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, fmt.Errorf("read /dev/kmsg: %w", err)
		case n == 0:
			return out.Bytes(), nil
		}
		if rec, ok := kmsgXIDRecord(buf[:n]); ok {
			out.Write(rec)
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}
