package push

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/droverhq/drover/cluster"
)

// Layout of push's state inside the remote workdir. Only these paths are
// ever written besides the pushed files themselves.
const (
	stateDir     = ".drover"
	manifestName = stateDir + "/manifest.json"
	// tmpDir holds uploads until every one of them has arrived; nothing in
	// it is part of the tree, so an interrupted push leaves the tree as it
	// was. The next push removes whatever is left in it.
	tmpDir = stateDir + "/push-tmp"
)

// manifestVersion changes when the format does; another version is treated
// like a missing manifest (re-check everything), never misread.
const manifestVersion = 1

// maxManifestSize bounds what is read back from a host, so a corrupt or
// hostile file cannot exhaust memory.
const maxManifestSize = 256 << 20

// manifest records what push last put in a workdir: it is how a re-push
// knows what changed without reading any file on the host, and which files
// drover owns (and may therefore delete) as opposed to checkpoints and logs
// written there by the job.
type manifest struct {
	Version int                     `json:"version"`
	Files   map[string]manifestFile `json:"files"`
	Dirs    map[string]manifestDir  `json:"dirs"`
}

type manifestFile struct {
	// SHA256 of the content, hex.
	SHA256 string      `json:"sha256,omitempty"`
	Size   int64       `json:"size"`
	Mode   fs.FileMode `json:"mode"`
	// MTime is the local modification time in Unix nanoseconds (SFTP
	// keeps only seconds on the host; the manifest keeps what was meant).
	MTime int64 `json:"mtime_ns"`
	// Pending marks an entry whose state on the host is unknown because a
	// push was interrupted while moving files into place; the next push
	// re-sends it (or deletes it if gone locally).
	Pending bool `json:"pending,omitempty"`
}

type manifestDir struct {
	Mode    fs.FileMode `json:"mode"`
	Pending bool        `json:"pending,omitempty"`
}

func newManifest() *manifest {
	return &manifest{Version: manifestVersion, Files: map[string]manifestFile{}, Dirs: map[string]manifestDir{}}
}

// errNoManifest is returned by readManifest when the host has no usable
// manifest; Sync then compares by stat and deletes nothing.
var errNoManifest = errors.New("no manifest")

// readManifest loads and validates the manifest at workdir. A missing,
// unparsable or invalid manifest yields an error wrapping errNoManifest
// saying why; any other error (permission, lost connection) is returned
// as is, because falling back would hide it.
func readManifest(fsys cluster.FS, workdir string) (*manifest, error) {
	name := path.Join(workdir, manifestName)
	r, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", errNoManifest, manifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is unusable (%v); comparing by size and mtime instead and deleting nothing", errNoManifest, manifestName, err)
	}
	return m, nil
}

// decodeManifest parses and validates a manifest. Every path in it is
// checked with validRel, because a tampered manifest must never make push
// delete or chmod anything outside the workdir.
func decodeManifest(data []byte) (*manifest, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestSize)
	}
	m := newManifest()
	if err := json.Unmarshal(data, m); err != nil {
		return nil, err
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("version %d, want %d", m.Version, manifestVersion)
	}
	if m.Files == nil {
		m.Files = map[string]manifestFile{}
	}
	if m.Dirs == nil {
		m.Dirs = map[string]manifestDir{}
	}
	for p, f := range m.Files {
		if err := validRel(p); err != nil {
			return nil, err
		}
		if f.Mode&^fs.ModePerm != 0 || f.Size < 0 {
			return nil, fmt.Errorf("entry %q: bad mode or size", p)
		}
		if !f.Pending {
			if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != 32 {
				return nil, fmt.Errorf("entry %q: bad sha256 %q", p, f.SHA256)
			}
		}
	}
	for p, d := range m.Dirs {
		if err := validRel(p); err != nil {
			return nil, err
		}
		if d.Mode&^fs.ModePerm != 0 {
			return nil, fmt.Errorf("directory entry %q: bad mode", p)
		}
	}
	return m, nil
}

// validRel accepts only clean, relative, slash-separated paths that stay
// inside the workdir and outside push's own state directory.
func validRel(p string) error {
	bad := func(why string) error { return fmt.Errorf("refusing path %q: %s", p, why) }
	switch {
	case p == "" || p == ".":
		return bad("empty")
	case strings.HasPrefix(p, "/"):
		return bad("absolute")
	case strings.ContainsRune(p, 0):
		return bad("contains NUL")
	}
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "..":
			return bad("'..' would leave the workdir")
		case "", ".":
			return bad("not a clean path")
		}
	}
	if p == stateDir || strings.HasPrefix(p, stateDir+"/") {
		return bad("inside drover's " + stateDir + " directory")
	}
	return nil
}

// writeManifest replaces the manifest atomically: it is written under
// tmpDir and renamed over the old one, so a host never holds half a
// manifest.
func writeManifest(fsys cluster.FS, workdir string, m *manifest) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	tmp := path.Join(workdir, tmpDir, "manifest.json")
	w, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := fsys.Rename(tmp, path.Join(workdir, manifestName)); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}
