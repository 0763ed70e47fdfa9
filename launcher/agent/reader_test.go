package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadCarriedReader(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o755))
		return p
	}
	tests := []struct {
		name, content, want, err string
	}{
		{"plain", "\x7fELF a plain static build", "", ""},
		{"short", "x", "", ""},
		{"carried", "\x7fELF agent" + "READER" + fmt.Sprintf("%s%012d", ReaderFooter, 6), "READER", ""},
		{"too long", "ab" + fmt.Sprintf("%s%012d", ReaderFooter, 99), "", "bad NVML reader footer"},
		{"not a number", "ab" + ReaderFooter + "00000000000x", "", "bad NVML reader footer"},
	}
	for _, tt := range tests {
		got, err := ReadCarriedReader(write(tt.name, tt.content))
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, string(got), tt.name)
	}
}

// findLibrary looks where the loader would: LD_LIBRARY_PATH first, then
// ld.so.conf's directories (includes followed), then the defaults.
func TestFindLibraryAndLdConf(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ld.so.conf")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ld.so.conf.d"), 0o755))
	require.NoError(t, os.WriteFile(conf, []byte("# comment\ninclude ld.so.conf.d/*.conf\n/opt/a # trailing\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ld.so.conf.d", "nvidia.conf"), []byte("/usr/lib/nvidia\n\n"), 0o644))
	assert.Equal(t, []string{"/usr/lib/nvidia", "/opt/a"}, ldConfDirs(conf, 0))

	libDir := filepath.Join(dir, "lib")
	require.NoError(t, os.MkdirAll(libDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(libDir, "libfake-drover.so.1"), nil, 0o644))
	assert.Equal(t, filepath.Join(libDir, "libfake-drover.so.1"), findLibrary("libfake-drover.so.1", "/nonexistent:"+libDir))
	assert.Empty(t, findLibrary("libfake-drover.so.1", ""))
}
