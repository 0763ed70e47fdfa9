package push

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// phaseFiles are the files of each phase of a push (the package doc's
// phase map) and the phase types each may name: its own, and the value it
// is handed by the phase before (the plan reads the scan's hostScan). A
// phase naming another phase's type is calling back into it, which is
// what the split of the 49-method syncer ended (issue 29).
var phaseFiles = map[string][]string{
	"scan.go":     {"hostScan"},
	"tree.go":     {},
	"pushplan.go": {"planner", "hostScan"},
	"guard.go":    {"planner"},
	"upload.go":   {"uploader"},
	"stream.go":   {"uploader"},
	"nospace.go":  {"uploader"},
	"commit.go":   {"committer"},
}

// phaseTypes are the types of the four phases.
var phaseTypes = []string{"hostScan", "planner", "uploader", "committer"}

// maxMethods is the most methods a type of the push may have: the phases'
// largest (committer) has 17; the syncer they replaced had 49.
const maxMethods = 20

// parsePushFiles parses the package's shipped files, by name.
func parsePushFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return files
}

// idents returns the identifiers f uses (comments aside).
func idents(f *ast.File) map[string]bool {
	seen := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			seen[id.Name] = true
		}
		return true
	})
	return seen
}

// TestPushPhasesApart keeps the push's four phases apart: no phase's
// files name another phase's type (but the value it is handed), run
// names every phase, and no type gathers the methods of a hub again.
func TestPushPhasesApart(t *testing.T) {
	files := parsePushFiles(t)
	for name, allowed := range phaseFiles {
		f, ok := files[name]
		if !ok {
			t.Errorf("%s: no such file; update phaseFiles with the package doc's phase map", name)
			continue
		}
		used := idents(f)
		for _, typ := range phaseTypes {
			if used[typ] && !slices.Contains(allowed, typ) {
				t.Errorf("%s names %s: a phase calls back into another (pass a value forward instead)", name, typ)
			}
		}
	}
	runNames := map[string]bool{}
	methods := map[string]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			typ := fd.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				methods[id.Name]++
				if id.Name == "hostPush" && fd.Name.Name == "run" {
					runNames = idents(&ast.File{Name: fd.Name, Decls: []ast.Decl{fd}})
				}
			}
		}
	}
	for _, want := range []string{"scanHost", "planner", "uploader", "committer"} {
		if !runNames[want] {
			t.Errorf("hostPush.run does not name %s: Sync no longer reads as its phases", want)
		}
	}
	var over []string
	for typ, n := range methods {
		if n > maxMethods {
			over = append(over, typ)
		}
	}
	sort.Strings(over)
	for _, typ := range over {
		t.Errorf("%s has %d methods (at most %d): split it by phase", typ, methods[typ], maxMethods)
	}
}
