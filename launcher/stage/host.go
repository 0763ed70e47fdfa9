package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
)

// Host is one host a staging reads from or writes to: its file access
// and transport (the commands that list and hash a destination), its
// absolute workdir and home, and what a direct copy needs of it (its
// address on the job's network and drover's agent there).
type Host struct {
	Name    string
	T       cluster.Transport
	FS      cluster.FS
	Home    string
	Workdir string
	Addr    string
	Peer    checkpoint.Peer
}

func (h Host) copyHost(own string) checkpoint.Host {
	return checkpoint.Host{Name: h.Name, FS: h.FS, Own: own, Addr: h.Addr, Peer: h.Peer}
}

// Area is the stage area of the destination dest: beside it, so on its
// filesystem (batches are renamed into dest), holding the manifest and
// the batches in flight.
func Area(dest string) string {
	return path.Join(path.Dir(dest), ".drover-stage."+path.Base(dest))
}

// manifestFile is the manifest's name in the stage area.
const manifestFile = "manifest.json"

// maxManifestFile bounds reading a manifest from a host.
const maxManifestFile = 256 << 20

type manifestDoc struct {
	Version int     `json:"version"`
	Source  string  `json:"source"`
	Files   Listing `json:"files"`
}

// readManifest reads what drover staged at dest on h; nil when nothing.
// A manifest that does not parse is nothing: every file is sent again.
func readManifest(h Host, dest string) (Listing, error) {
	b, err := hostio.ReadSmall(h.FS, path.Join(Area(dest), manifestFile), maxManifestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the stage manifest of %s on %s: %w", dest, h.Name, err)
	}
	var doc manifestDoc
	if json.Unmarshal(b, &doc) != nil || doc.Version != 1 {
		return nil, nil
	}
	return doc.Files, nil
}

func writeManifest(h Host, dest, source string, l Listing) error {
	b, err := json.Marshal(manifestDoc{Version: 1, Source: source, Files: l})
	if err != nil {
		return err
	}
	if err := hostio.WriteAtomic(h.FS, Area(dest), manifestFile, b); err != nil {
		return fmt.Errorf("write the stage manifest of %s on %s: %w", dest, h.Name, err)
	}
	return nil
}

// command runs args on h in dir and returns its stdout.
func command(ctx context.Context, h Host, dir string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	errw := cluster.NewTailBuffer(2 << 10)
	p, err := h.T.Start(ctx, cluster.Cmd{Args: args, Dir: dir, Stdout: &out, Stderr: errw})
	if err == nil {
		err = p.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("%s on %s in %s: %w (%s)", args[0], h.Name, dir, err, strings.TrimSpace(errw.String()))
	}
	return out.Bytes(), nil
}

// exists says whether dir is there on h.
func exists(h Host, dir string) (bool, error) {
	_, err := h.FS.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s on %s: %w", dir, h.Name, err)
	}
	return true, nil
}

// list is every regular file under dir on h with its size and mtime, in
// one command (GNU find); an absent dir holds nothing.
func list(ctx context.Context, h Host, dir string) (Listing, error) {
	if ok, err := exists(h, dir); !ok || err != nil {
		return Listing{}, err
	}
	out, err := command(ctx, h, dir, "find", ".", "-type", "f", "-printf", `%s %T@ %P\0`)
	if err != nil {
		return nil, err
	}
	return parseFind(out)
}

// parseFind reads find's "SIZE MTIME REL\0" records.
func parseFind(out []byte) (Listing, error) {
	l := Listing{}
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(rec, " ", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("find printed %q", rec)
		}
		size, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("find printed %q: %w", rec, err)
		}
		secs, _, _ := strings.Cut(f[1], ".")
		mt, err := strconv.ParseInt(secs, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("find printed %q: %w", rec, err)
		}
		if !fs.ValidPath(f[2]) || f[2] == "." {
			// Not a path under the data set: a source host that lists
			// one gets nothing renamed outside the destination.
			return nil, fmt.Errorf("find printed %q, not a path inside the data set", rec)
		}
		l[f[2]] = File{Size: size, MTime: mt}
	}
	return l, nil
}

// hash fills in the SHA-256 of every file of l under dir on h
// (sha256sum on the host: the bytes never leave it).
func hash(ctx context.Context, h Host, dir string, l Listing) error {
	if len(l) == 0 {
		return nil
	}
	out, err := command(ctx, h, dir, "find", ".", "-type", "f", "-exec", "sha256sum", "-z", "--", "{}", "+")
	if err != nil {
		return err
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		sum, rel, ok := strings.Cut(rec, "  ")
		if !ok {
			continue
		}
		rel = strings.TrimPrefix(rel, "./")
		if f, ok := l[rel]; ok {
			f.Sum = sum
			l[rel] = f
		}
	}
	return nil
}

// freeSpace is what is free at dest on h (its nearest existing parent),
// -1 when the file access cannot tell.
func freeSpace(h Host, dest string) int64 {
	fsp, ok := h.FS.(interface{ FreeSpace(string) (int64, error) })
	if !ok {
		return -1
	}
	for p := dest; ; p = path.Dir(p) {
		if n, err := fsp.FreeSpace(p); err == nil {
			return n
		}
		if p == "/" || p == "." {
			return -1
		}
	}
}

// state reads what h holds at dest: manifest, files, (verifying) their
// sums, and free space.
func state(ctx context.Context, h Host, dest string, verify bool) (HostState, error) {
	st := HostState{Name: h.Name, Dest: dest, Free: freeSpace(h, dest)}
	var err error
	if st.Manifest, err = readManifest(h, dest); err != nil {
		return st, err
	}
	if st.Disk, err = list(ctx, h, dest); err != nil {
		return st, err
	}
	if verify {
		err = hash(ctx, h, dest, st.Disk)
	}
	return st, err
}

// farm puts hard links to files (of root on h) under dir, copies where
// linking fails (another filesystem): the sender then sends only them.
func farm(ctx context.Context, h Host, root, dir string, files []string) error {
	if err := h.FS.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s on %s: %w", dir, h.Name, err)
	}
	for start := 0; start < len(files); start += 500 {
		chunk := files[start:min(start+500, len(files))]
		args := append([]string{"cp", "-l", "--parents", "-t", dir, "--"}, chunk...)
		if _, err := command(ctx, h, root, args...); err != nil {
			args[1] = "-p"
			if _, err := command(ctx, h, root, args...); err != nil {
				return err
			}
		}
	}
	return nil
}
