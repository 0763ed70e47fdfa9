package push

import "testing"

func BenchmarkScanBenchTree(b *testing.B) {
	cache := b.TempDir()
	if _, err := ScanLocal("/tmp/drover-bench/tree", Options{CacheDir: cache}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ScanLocal("/tmp/drover-bench/tree", Options{CacheDir: cache}); err != nil {
			b.Fatal(err)
		}
	}
}
