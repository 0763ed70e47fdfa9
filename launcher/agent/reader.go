package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReaderFooter ends a drover binary that carries the NVML reader
// (cmd/drover-nvml) appended to it: the reader's bytes, then this text and
// their length in 12 decimal digits. scripts/build-agent appends them; the
// kernel and Go's build information ignore what follows an ELF image.
const ReaderFooter = "drover-nvml-reader:"

const footerSize = len(ReaderFooter) + 12

// carriedReader returns the NVML reader appended to the running binary,
// or nil when it carries none.
func carriedReader() ([]byte, error) {
	self, err := os.Executable()
	if err != nil {
		// No /proc (an empty chroot): argv[0] is the path we were run by.
		if self = os.Args[0]; !strings.Contains(self, "/") {
			return nil, fmt.Errorf("find this binary: %w", err)
		}
	}
	return ReadCarriedReader(self)
}

// ReadCarriedReader returns the NVML reader appended to the binary at
// path (see ReaderFooter), or nil when it carries none.
func ReadCarriedReader(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < int64(footerSize) {
		return nil, nil
	}
	foot := make([]byte, footerSize)
	if _, err := f.ReadAt(foot, fi.Size()-int64(footerSize)); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(string(foot), ReaderFooter) {
		return nil, nil
	}
	n, err := strconv.ParseInt(string(foot[len(ReaderFooter):]), 10, 64)
	if err != nil || n <= 0 || n > fi.Size()-int64(footerSize) {
		return nil, fmt.Errorf("%s: bad NVML reader footer %q", path, foot)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, fi.Size()-int64(footerSize)-n); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// findLibrary looks for a shared library where the dynamic loader would:
// LD_LIBRARY_PATH, the directories /etc/ld.so.conf names, and the default
// ones. It is only asked when no loader can be run to look for real, to
// tell "no driver" from "a driver this binary cannot load".
func findLibrary(name, ldLibraryPath string) string {
	var dirs []string
	dirs = append(dirs, filepath.SplitList(ldLibraryPath)...)
	dirs = append(dirs, ldConfDirs("/etc/ld.so.conf", 0)...)
	dirs = append(dirs, "/lib", "/usr/lib", "/lib64", "/usr/lib64",
		"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
		"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// ldConfDirs reads the directories of an ld.so.conf, following include
// lines (globs) a few levels deep.
func ldConfDirs(path string, depth int) []string {
	b, err := os.ReadFile(path)
	if err != nil || depth > 4 {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "include"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			pat := strings.TrimSpace(rest)
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(path), pat)
			}
			matches, _ := filepath.Glob(pat)
			for _, m := range matches {
				dirs = append(dirs, ldConfDirs(m, depth+1)...)
			}
			continue
		}
		if line != "" {
			dirs = append(dirs, line)
		}
	}
	return dirs
}
