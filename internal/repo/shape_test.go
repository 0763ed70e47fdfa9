package repo

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the longest a shipped function may be, from its func
// keyword to its closing brace: past that a reader loses the thread, and
// a function that long always hides steps that deserve a name.
const maxFuncLines = 80

// goDirs returns the repository's Go files by directory (relative,
// slash-separated), leaving out testdata and hidden directories, which
// hold no package of ours.
func goDirs(t *testing.T) map[string][]string {
	t.Helper()
	r := root(t)
	dirs := map[string][]string{}
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			rel, err := filepath.Rel(r, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs[filepath.ToSlash(rel)] = append(dirs[filepath.ToSlash(rel)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", r, err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found Go files in %d directories under %s: not this repository?", len(dirs), r)
	}
	return dirs
}

// shipped reports whether the file at dir/file is part of what drover
// ships: not a test, not under internal/ (the test and bench harnesses).
func shipped(dir, file string) bool {
	return !strings.HasSuffix(file, "_test.go") && dir != "internal" && !strings.HasPrefix(dir, "internal/")
}

// TestNoFunctionOver80Lines keeps every shipped function (tests and
// internal/ aside) at most maxFuncLines long.
func TestNoFunctionOver80Lines(t *testing.T) {
	fset := token.NewFileSet()
	var long []string
	for dir, files := range goDirs(t) {
		for _, p := range files {
			if !shipped(dir, p) {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", p, err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
				if n := end.Line - start.Line + 1; n > maxFuncLines {
					rel, _ := filepath.Rel(root(t), start.Filename)
					long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", rel, start.Line, fd.Name.Name, n))
				}
			}
		}
	}
	sort.Strings(long)
	for _, l := range long {
		t.Errorf("%s (at most %d: extract the steps it hides into named helpers)", l, maxFuncLines)
	}
}

// TestEveryPackageHasDoc checks that every package, internal/ and
// examples included, says what it is for in a doc comment that starts
// as go doc expects: "Package NAME ..." or, for a command, "Command NAME ...".
func TestEveryPackageHasDoc(t *testing.T) {
	fset := token.NewFileSet()
	for dir, files := range goDirs(t) {
		var name, doc string
		for _, p := range files {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatalf("parse %s: %v", p, err)
			}
			name = f.Name.Name
			if f.Doc != nil {
				doc = f.Doc.Text()
			}
		}
		if name == "" {
			continue // tests only
		}
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + filepath.Base(dir) + " "
		}
		if !strings.HasPrefix(doc, want) {
			t.Errorf("package %s (%s) has no doc comment starting %q: add a doc.go that says what it is for", name, dir, want)
		}
	}
}

// TestSkipsGoThroughTestenv keeps "skip here, fail under CI=true" in one
// place: a test that reads CI itself is a hand copy of internal/testenv
// that drifts (nine did, and a dozen skips had no guard at all).
func TestSkipsGoThroughTestenv(t *testing.T) {
	for dir, files := range goDirs(t) {
		if dir == "internal/testenv" || dir == "internal/repo" {
			continue
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `Getenv("CI")`) {
				rel, _ := filepath.Rel(root(t), p)
				t.Errorf(`%s reads $CI itself: use testenv.Need, LookPath or Root, which fail under CI=true`, rel)
			}
		}
	}
}
