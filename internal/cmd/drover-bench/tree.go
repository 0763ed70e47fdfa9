package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
)

// treeSpec describes the code tree the push benchmark sends: what a
// training repository looks like (many small sources, a few large binaries
// such as tokenizers or small weights).
type treeSpec struct {
	Seed       int64
	Small      int // number of small source files
	SmallMin   int // bytes
	SmallMax   int // bytes
	Packages   int // directories the sources are spread over
	Binaries   int
	BinarySize int // bytes each
}

// defaultTree is about 70 MB in 3,000 files: 2,995 sources averaging 6 KB
// (18 MB) and five 10 MiB binaries (52 MB).
var defaultTree = treeSpec{
	Seed: 20240601, Small: 2995, SmallMin: 512, SmallMax: 11500, Packages: 50,
	Binaries: 5, BinarySize: 10 << 20,
}

// Files is how many files the tree has.
func (s treeSpec) Files() int { return s.Small + s.Binaries }

// smallPath names source file i.
func (s treeSpec) smallPath(i int) string {
	return filepath.Join("src", fmt.Sprintf("pkg%02d", i%s.Packages), fmt.Sprintf("mod%04d.py", i))
}

// generateTree writes the tree into dir (replacing what was there) and
// returns its total size. The same spec always gives byte-identical files:
// math/rand with a fixed seed, drawn in a fixed order, so every run and
// every machine pushes the same bytes.
func generateTree(dir string, s treeSpec) (int64, error) {
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("generate tree: clear %s: %w", dir, err)
	}
	r := rand.New(rand.NewSource(s.Seed))
	var total int64
	write := func(rel string, data []byte) error {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("generate tree: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("generate tree: %w", err)
		}
		total += int64(len(data))
		return nil
	}
	buf := make([]byte, max(s.SmallMax, s.BinarySize))
	for i := 0; i < s.Small; i++ {
		n := s.SmallMin
		if s.SmallMax > s.SmallMin {
			n += r.Intn(s.SmallMax - s.SmallMin + 1)
		}
		if err := write(s.smallPath(i), sourceText(r, buf[:n])); err != nil {
			return total, err
		}
	}
	for i := 0; i < s.Binaries; i++ {
		b := buf[:s.BinarySize]
		r.Read(b) // math/rand's Read never fails
		if err := write(filepath.Join("assets", fmt.Sprintf("blob%d.bin", i)), b); err != nil {
			return total, err
		}
	}
	return total, nil
}

// sourceText fills b with lines of lower-case "code": text, so that a tool
// that compresses gains what it would on real sources.
func sourceText(r *rand.Rand, b []byte) []byte {
	const letters = "abcdefghijklmnopqrstuvwxyz_ ()=.,"
	col := 0
	for i := range b {
		if col >= 40+r.Intn(40) || i == len(b)-1 {
			b[i] = '\n'
			col = 0
			continue
		}
		b[i] = letters[r.Intn(len(letters))]
		col++
	}
	return b
}

// changeOne rewrites one source file with content that depends on rep, so
// that every repetition of the "one file changed" push has exactly one
// file to send.
func changeOne(dir string, s treeSpec, rep int) error {
	p := filepath.Join(dir, s.smallPath(0))
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("change one file: %w", err)
	}
	if i := lastMarker(data); i >= 0 {
		data = data[:i]
	}
	// The size changes too: a tool that trusts size and a whole-second
	// mtime (rsync's quick check) must still see the change.
	data = append(data, fmt.Sprintf("%s%d %s\n", changeMarker, rep, strings.Repeat("x", rep+1))...)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("change one file: %w", err)
	}
	return nil
}

const changeMarker = "# drover-bench change "

func lastMarker(data []byte) int {
	return bytes.LastIndex(data, []byte(changeMarker))
}

// treeSize sums the regular files under dir, skipping top-level names in
// skip (drover's .drover state directory), to check that a push really
// delivered the tree.
func treeSize(dir string, skip ...string) (files int, size int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir {
			for _, s := range skip {
				if filepath.Join(dir, s) == p {
					return filepath.SkipDir
				}
			}
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			size += info.Size()
		}
		return nil
	})
	return files, size, err
}
