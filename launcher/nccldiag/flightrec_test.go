package nccldiag

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// osFiles is a host's file access over this machine's filesystem.
type osFiles struct{}

func (osFiles) Stat(p string) (fs.FileInfo, error)   { return os.Stat(p) }
func (osFiles) Open(p string) (io.ReadCloser, error) { return os.Open(p) }

// TestGather: the dumps a host has are copied under drover's names; a
// missing one is no error; a directory, a name with a path in it, and a
// file over the limit are refused and never written.
func TestGather(t *testing.T) {
	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "rank-0"), []byte("pickle 0"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(host, "rank-2"), 0o755))
	big, err := os.Create(filepath.Join(host, "rank-3"))
	require.NoError(t, err)
	require.NoError(t, big.Truncate(DumpLimit+1))
	big.Close()
	out := filepath.Join(t.TempDir(), "flight-recorder")
	dump := func(file, name string) Dump {
		return Dump{Host: "h1", Files: osFiles{}, Path: filepath.Join(host, file), Name: name}
	}
	copied, err := Gather([]Dump{
		dump("rank-0", "rank-0"),
		dump("rank-1", "rank-1"), // never written: its watchdog did not fire
		dump("rank-2", "rank-2"),
		dump("rank-3", "rank-3"),
		dump("rank-0", "../escape"),
	}, out)
	assert.Equal(t, []string{"rank-0"}, copied)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
	assert.Contains(t, err.Error(), "over drover's limit")
	assert.Contains(t, err.Error(), "not a plain file name")
	data, rerr := os.ReadFile(filepath.Join(out, "rank-0"))
	require.NoError(t, rerr)
	assert.Equal(t, "pickle 0", string(data))
	entries, _ := os.ReadDir(out)
	assert.Len(t, entries, 1)
	assert.NoFileExists(t, filepath.Join(filepath.Dir(out), "escape"))
}
