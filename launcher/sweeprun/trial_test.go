package sweeprun

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The seed, run by a real sh: the trial directory gets hard links to
// the pushed code and its own copy of the push's state; an existing one
// is left alone; one that cannot be seeded leaves nothing behind.
func TestSeedCommand(t *testing.T) {
	wd := t.TempDir()
	code := filepath.Join(wd, CodeDir())
	require.NoError(t, os.MkdirAll(filepath.Join(code, ".drover"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(code, "pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(code, "pkg", "train.py"), []byte("print(1)\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(code, ".drover", "manifest.sum"), []byte("k\n"), 0o644))
	seed := func(code, trial string) error {
		cmd := exec.Command("sh", "-c", SeedCommand(code, trial))
		cmd.Dir = wd
		out, err := cmd.CombinedOutput()
		t.Logf("%s", out)
		return err
	}
	require.NoError(t, seed(CodeDir(), TrialDir("t03")))
	inode := func(p string) uint64 {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	trial := filepath.Join(wd, TrialDir("t03"))
	assert.Equal(t, inode(filepath.Join(code, "pkg", "train.py")), inode(filepath.Join(trial, "pkg", "train.py")), "a hard link")
	assert.NotEqual(t, inode(filepath.Join(code, ".drover", "manifest.sum")), inode(filepath.Join(trial, ".drover", "manifest.sum")), "its own copy")
	b, err := os.ReadFile(filepath.Join(trial, ".drover", "manifest.sum"))
	require.NoError(t, err)
	assert.Equal(t, "k\n", string(b))

	require.NoError(t, os.WriteFile(filepath.Join(trial, "ckpt"), []byte("x"), 0o644))
	require.NoError(t, seed(CodeDir(), TrialDir("t03")), "an existing trial directory")
	assert.FileExists(t, filepath.Join(trial, "ckpt"), "left alone")

	assert.Error(t, seed("trials/nocode", TrialDir("t04")))
	assert.NoDirExists(t, filepath.Join(wd, TrialDir("t04")))
	assert.NoDirExists(t, filepath.Join(wd, TrialDir("t04")+".seed"))
}
