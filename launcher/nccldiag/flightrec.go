package nccldiag

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files is a host's file access as Gather needs it (cluster.FS has it).
type Files interface {
	Stat(path string) (fs.FileInfo, error)
	Open(path string) (io.ReadCloser, error)
}

// Dump is one rank's flight-recorder file: where its host has it, and the
// name drover gives it on the controller.
type Dump struct {
	Host  string
	Files Files
	Path  string
	// Name is the file's name in the directory Gather writes: drover's
	// ("rank-3"), never one a host gave.
	Name string
}

// Limits of a gathering: a flight recorder's dump of 2000 entries is
// hundreds of KiB; a host that offers more is not copied past them.
const (
	DumpLimit  = 16 << 20
	TotalLimit = 256 << 20
)

// Gather copies each dump that its host has (a regular file, at most
// DumpLimit bytes, TotalLimit in all) into dir, under its Name, and
// returns the names copied. A rank without a file (its watchdog never
// timed out, or torch has no flight recorder) is not an error; a file
// that could not be read or is too large is, joined with the others.
func Gather(dumps []Dump, dir string) ([]string, error) {
	var copied []string
	var errs []error
	var total int64
	for _, d := range dumps {
		if d.Name == "" || d.Name != filepath.Base(d.Name) || strings.HasPrefix(d.Name, ".") {
			errs = append(errs, fmt.Errorf("flight recorder dump %s on %s: %q is not a plain file name", d.Path, d.Host, d.Name))
			continue
		}
		fi, err := d.Files.Stat(d.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("flight recorder dump %s on %s: %w", d.Path, d.Host, err))
			continue
		case !fi.Mode().IsRegular():
			errs = append(errs, fmt.Errorf("flight recorder dump %s on %s is not a regular file (%s); not copied", d.Path, d.Host, fi.Mode().Type()))
			continue
		case fi.Size() > DumpLimit || total+fi.Size() > TotalLimit:
			errs = append(errs, fmt.Errorf("flight recorder dump %s on %s is %d bytes, over drover's limit (%d per file, %d in all); not copied", d.Path, d.Host, fi.Size(), DumpLimit, TotalLimit))
			continue
		}
		n, err := copyDump(d, dir, min(DumpLimit, TotalLimit-total))
		total += n
		if err != nil {
			errs = append(errs, err)
			continue
		}
		copied = append(copied, d.Name)
	}
	return copied, errors.Join(errs...)
}

// copyDump copies one dump, at most limit bytes: a file that grew past
// its Stat is cut off and removed.
func copyDump(d Dump, dir string, limit int64) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("gather flight recorder dumps: %w", err)
	}
	r, err := d.Files.Open(d.Path)
	if err != nil {
		return 0, fmt.Errorf("flight recorder dump %s on %s: %w", d.Path, d.Host, err)
	}
	defer r.Close()
	dst := filepath.Join(dir, d.Name)
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("gather flight recorder dump of %s: %w", d.Host, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	err = errors.Join(err, f.Close())
	if err == nil && n > limit {
		err = fmt.Errorf("grew past drover's limit of %d bytes while read", limit)
	}
	if err != nil {
		os.Remove(dst)
		return n, fmt.Errorf("flight recorder dump %s on %s: %w", d.Path, d.Host, err)
	}
	return n, nil
}
