package push

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// later is a scan start far enough ahead that no file is too recent to
// cache (the racy window is tested on its own).
var later = time.Now().Add(time.Hour)

func digests(t *testing.T, tree *Tree) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range tree.Files {
		out[f.Path] = f.SHA256
	}
	return out
}

// cachedScan scans dir with the digest cache in cache, as of later.
func cachedScan(t *testing.T, dir, cache string) *Tree {
	t.Helper()
	tree, err := scanLocal(dir, Options{CacheDir: cache}, later)
	require.NoError(t, err)
	return tree
}

func TestScanCacheReusesDigests(t *testing.T) {
	local, cache := t.TempDir(), t.TempDir()
	writeFiles(t, local, v1)
	first := cachedScan(t, local, cache)
	assert.Equal(t, digests(t, mustScan(t, local)), digests(t, first), "cached scan = uncached scan")

	// Plant a wrong digest for train.py: a scan that believes the cache
	// (stat identity unchanged) returns it, which proves it did not hash.
	file := cachePath(cache, first.Dir)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	real := digests(t, first)["train.py"]
	fake := strings.Repeat("f", 64)
	require.Contains(t, string(data), real+" ")
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(data), real+" ", fake+" ", 1)), 0o600))
	second := cachedScan(t, local, cache)
	assert.Equal(t, fake, digests(t, second)["train.py"])

	// Replaced by a file of the same size and mtime (a new inode, as an
	// editor or git checkout writes): hashed again.
	p := filepath.Join(local, "train.py")
	info, err := os.Stat(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p+".new", []byte(strings.ToUpper(v1["train.py"])), 0o644))
	require.NoError(t, os.Rename(p+".new", p))
	require.NoError(t, os.Chtimes(p, info.ModTime(), info.ModTime()))
	third := cachedScan(t, local, cache)
	assert.Equal(t, digests(t, mustScan(t, local))["train.py"], digests(t, third)["train.py"])
	assert.NotEqual(t, real, digests(t, third)["train.py"])
}

// TestScanCacheSeesInPlaceEdit: same inode, size and mtime (set back
// with touch), new content: the ctime moved, so the file is hashed.
func TestScanCacheSeesInPlaceEdit(t *testing.T) {
	local, cache := t.TempDir(), t.TempDir()
	writeFiles(t, local, v1)
	first := cachedScan(t, local, cache)
	p := filepath.Join(local, "train.py")
	info, err := os.Stat(p)
	require.NoError(t, err)
	// Past the filesystem's timestamp granularity (a clock tick), so the
	// ctime differs; this is what the racy window covers in real use.
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, os.WriteFile(p, []byte(strings.ToUpper(v1["train.py"])), 0o644))
	require.NoError(t, os.Chtimes(p, info.ModTime(), info.ModTime()))
	second := cachedScan(t, local, cache)
	assert.NotEqual(t, digests(t, first)["train.py"], digests(t, second)["train.py"])
	assert.Equal(t, digests(t, mustScan(t, local)), digests(t, second))
}

// TestScanCacheSkipsRacyFiles: files changed within racyWindow of the
// scan are not cached, since a later change in the same clock tick would
// not show in their timestamps.
func TestScanCacheSkipsRacyFiles(t *testing.T) {
	local, cache := t.TempDir(), t.TempDir()
	writeFiles(t, local, v1) // ctime: now
	tree, err := ScanLocal(local, Options{CacheDir: cache})
	require.NoError(t, err)
	eachCacheEntry(cachePath(cache, tree.Dir), func(p string, _ cacheEntry) bool {
		t.Errorf("%s cached", p)
		return true
	})
}

func TestScanCacheCorruptIgnored(t *testing.T) {
	local, cache := t.TempDir(), t.TempDir()
	writeFiles(t, local, v1)
	tree := cachedScan(t, local, cache)
	want := digests(t, tree)
	for _, junk := range []string{"", "garbage\n", cacheHeader + "\nnot a line\n", cacheHeader + "\n" + strings.Repeat("a", 64) + " x 1 2 3 4 train.py\n"} {
		require.NoError(t, os.WriteFile(cachePath(cache, tree.Dir), []byte(junk), 0o600))
		got := cachedScan(t, local, cache)
		assert.Equal(t, want, digests(t, got), "cache %q", junk)
	}
}

// TestTreeManifestCached: the scan encodes the tree's manifest (what a
// host holds once it has the tree) and keeps it in the local cache under
// its key, where the next push finds it named by the hosts' sums; the
// encoding is canonical, so scanning the same tree with or without a
// cache gives the same key, and a changed tree another.
func TestTreeManifestCached(t *testing.T) {
	local, cache := t.TempDir(), t.TempDir()
	writeFiles(t, local, v1)
	first := cachedScan(t, local, cache)
	require.Equal(t, mustScan(t, local).key, first.key)
	require.Equal(t, stateKey(first.manifest), first.key)
	m, err := decodeManifest(first.manifest)
	require.NoError(t, err)
	assert.Equal(t, treeManifest(first).Files, m.Files)
	assert.Equal(t, treeManifest(first).Dirs, m.Dirs)
	assert.Equal(t, first.manifest, encodeManifest(treeManifest(first)), "encodeTree and encodeManifest agree")

	data, err := os.ReadFile(filepath.Join(cache, "manifests", first.key))
	require.NoError(t, err)
	assert.Equal(t, first.manifest, data)
	assert.Equal(t, data, first.known.cached(first.key))
	// A cached copy that does not match its name is not used.
	require.NoError(t, os.WriteFile(filepath.Join(cache, "manifests", first.key), []byte("junk"), 0o600))
	assert.Nil(t, first.known.cached(first.key))
	second := cachedScan(t, local, cache)
	assert.Equal(t, first.manifest, second.known.cached(first.key), "rewritten by the next scan")

	writeFiles(t, local, map[string]string{"train.py": "print('v2')\n"})
	third := cachedScan(t, local, cache)
	assert.NotEqual(t, first.key, third.key)
	assert.Equal(t, mustScan(t, local).key, third.key)
}
