package agent

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// maxStateFile bounds a state record as read: a few hundred bytes are
// written; a file that large is not one of drover's.
const maxStateFile = 1 << 20

// maxIndexEntries bounds how many entries of the host's live-run index
// `agent runs` looks at: one per live detached process.
const maxIndexEntries = 4096

// readRegular reads the regular file at path, at most max bytes, without
// ever blocking on what it opens: the path may come from the host's
// live-run index (~/.drover/live), whose entries the login account (or
// whoever wrote there) may point anywhere. A FIFO would hang the read
// past SIGTERM, /dev/zero would fill memory; both are refused, as is
// anything larger than max.
func readRegular(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s, not a regular file", path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes: not one of drover's records", path, max)
	}
	return data, nil
}
