package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/droverhq/drover/internal/testenv"
)

// root is the repository's top directory (this package is two below it).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// maxTracked is the largest file the repository may track: anything
// bigger is a build output or data that belongs elsewhere (a 5.5 MB
// drover-bench binary was tracked for weeks before anyone noticed).
const maxTracked = 1 << 20

func TestNoTrackedFileOver1MiB(t *testing.T) {
	git := testenv.LookPath(t, "git")
	cmd := exec.Command(git, "ls-files", "-z")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		testenv.Need(t, "a git checkout", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		t.Fatalf("git ls-files listed %d files: not this repository?", len(files))
	}
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(cmd.Dir, f))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Size() > maxTracked {
			t.Errorf("%s is tracked and %d bytes (over 1 MiB): git rm --cached it and ignore it", f, fi.Size())
		}
	}
}
