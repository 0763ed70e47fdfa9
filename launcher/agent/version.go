package agent

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the line `drover agent version` prints for this binary:
// "drover VERSION GOOS/GOARCH", VERSION naming the module version and the
// commit it was built from. The installer's script (remote's
// installScript) runs `agent version` once on every host after an upload:
// it proves that the host can execute the binary (the loader's complaint
// comes back if not) and that the file there is the drover build the
// controller expects.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("drover unknown %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return versionLine(bi, runtime.GOOS, runtime.GOARCH)
}

// FileVersion is the line the drover binary at path would print for
// `drover agent version`, read from the build information the Go linker
// stores in every executable. It works for binaries of any platform, so
// the controller knows what a linux/arm64 agent must answer without
// running it.
func FileVersion(path string) (string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the build information of %s: %w", path, err)
	}
	goos, goarch := setting(bi, "GOOS"), setting(bi, "GOARCH")
	if goos == "" || goarch == "" {
		return "", fmt.Errorf("read the build information of %s: no GOOS/GOARCH recorded", path)
	}
	return versionLine(bi, goos, goarch), nil
}

// versionLine formats a build: the main module's version, then the VCS
// revision (with "-dirty" for a modified tree) when the build recorded one.
func versionLine(bi *debug.BuildInfo, goos, goarch string) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if rev := setting(bi, "vcs.revision"); rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += "+" + rev
		if setting(bi, "vcs.modified") == "true" {
			v += "-dirty"
		}
	}
	return fmt.Sprintf("drover %s %s/%s", v, goos, goarch)
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// WriteVersion writes what `drover version` (and `drover --version`)
// prints for this binary: the line `agent version` prints (which the
// installer compares, so it never changes shape), then the full commit,
// whether the tree was modified, and the Go release that built it, so that
// a bug report names the exact build.
func WriteVersion(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	_, err := io.WriteString(w, versionText(Version(), bi))
	return err
}

// versionText is WriteVersion's text for line (Version's) and bi (nil when
// the binary has no build information).
func versionText(line string, bi *debug.BuildInfo) string {
	lines := []string{line}
	if bi == nil {
		return strings.Join(append(lines, "go: "+runtime.Version()), "\n") + "\n"
	}
	commit := setting(bi, "vcs.revision")
	if commit == "" {
		commit = "unknown (built without VCS stamping: not from a git checkout, or with -buildvcs=false)"
	} else if setting(bi, "vcs.modified") == "true" {
		commit += " (modified tree)"
	}
	if t := setting(bi, "vcs.time"); t != "" {
		commit += ", committed " + t
	}
	lines = append(lines, "commit: "+commit, "go: "+bi.GoVersion)
	return strings.Join(lines, "\n") + "\n"
}
