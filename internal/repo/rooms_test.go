package repo

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A type whose methods are many, or spread over many files, holds several
// concerns: the next feature would land in it too. Past these numbers a
// concern wants a type (or a package) of its own (issue 35).
const (
	maxMethods     = 25
	maxMethodFiles = 4
)

// The run core's package root stays small enough to read, and its files
// read one way: a file names only what files below it declare, so that a
// newcomer can read the package from its leaves up.
const (
	maxRootFiles   = 25
	maxBackImports = 15
)

// TestNoTypeHoldsManyConcerns keeps every shipped type (tests and
// internal/ aside) at most maxMethods methods, declared in at most
// maxMethodFiles files.
func TestNoTypeHoldsManyConcerns(t *testing.T) {
	type key struct{ dir, name string }
	methods := map[key]int{}
	files := map[key]map[string]bool{}
	fset := token.NewFileSet()
	for dir, paths := range goDirs(t) {
		for _, p := range paths {
			if !shipped(dir, filepath.Base(p)) || strings.Contains(dir, "transporttest") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", p, err)
			}
			for _, decl := range f.Decls {
				name, ok := receiverName(decl)
				if !ok {
					continue
				}
				k := key{dir, name}
				methods[k]++
				if files[k] == nil {
					files[k] = map[string]bool{}
				}
				files[k][filepath.Base(p)] = true
			}
		}
	}
	var over []string
	for k, m := range methods {
		if m > maxMethods || len(files[k]) > maxMethodFiles {
			over = append(over, fmt.Sprintf("%s.%s: %d methods in %d files", k.dir, k.name, m, len(files[k])))
		}
	}
	sort.Strings(over)
	if len(over) > 0 {
		t.Errorf("types over %d methods or with methods in more than %d files (give a concern a type or a package of its own):\n%s",
			maxMethods, maxMethodFiles, strings.Join(over, "\n"))
	}
}

// receiverName is the name of the type a method declaration is of.
func receiverName(decl ast.Decl) (string, bool) {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
		return "", false
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// TestLauncherRootReadsOneWay keeps the launcher package's root at most
// maxRootFiles non-test files, with no cycle among its files in the
// type-checked graph (file a imports file b when a names anything b
// declares: a type, function, variable, constant, field or method), and at
// most maxBackImports imports that run back up when the files are drawn
// in floors.
func TestLauncherRootReadsOneWay(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the launcher package against its dependencies' export data (go list -export)")
	}
	g := fileGraph(t, "./launcher")
	if n := len(g.files); n > maxRootFiles {
		t.Errorf("launcher's root holds %d non-test files, more than %d: give a concern a package of its own", n, maxRootFiles)
	}
	if cyc := g.cycles(); len(cyc) > 0 {
		var b strings.Builder
		for _, c := range cyc {
			fmt.Fprintf(&b, "\n%d files: %s", len(c), strings.Join(c, " "))
			for _, e := range g.within(c) {
				fmt.Fprintf(&b, "\n\t%s", e)
			}
		}
		t.Errorf("launcher's files import each other in a cycle (a file names what another declares, and back):%s", b.String())
	}
	if back := g.backImports(); len(back) > maxBackImports {
		t.Errorf("launcher's files drawn in floors: %d imports run back up, more than %d:\n%s", len(back), maxBackImports, strings.Join(back, "\n"))
	}
}

// graph is which file of one package imports which.
type graph struct {
	files []string
	edges map[string]map[string]bool
	// why names, for each import, what the importing file names of the
	// imported one (a few names, sorted), so that a failure says what to
	// move.
	why map[[2]string]map[string]bool
}

// fileGraph type-checks the package at pattern (its non-test files, for
// this platform) and returns its files' graph.
func fileGraph(t *testing.T, pattern string) *graph {
	t.Helper()
	pkg, exports := listExports(t, pattern)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(p)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp.(types.ImporterFrom)}
	tpkg, err := conf.Check(pkg.ImportPath, fset, files, info)
	if err != nil {
		t.Fatalf("type-check %s: %v", pkg.ImportPath, err)
	}
	g := &graph{files: pkg.GoFiles, edges: map[string]map[string]bool{}, why: map[[2]string]map[string]bool{}}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != tpkg || !obj.Pos().IsValid() {
			return
		}
		from := filepath.Base(fset.Position(at).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to || !local(obj, tpkg) {
			return
		}
		if g.edges[from] == nil {
			g.edges[from] = map[string]bool{}
		}
		g.edges[from][to] = true
		k := [2]string{from, to}
		if g.why[k] == nil {
			g.why[k] = map[string]bool{}
		}
		g.why[k][obj.Name()] = true
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}
	return g
}

// local reports whether obj is declared at the package's level or as a
// field or method of one of its types, rather than inside a function.
func local(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Var:
		if o.IsField() {
			return true
		}
	case *types.Func:
		if o.Type().(*types.Signature).Recv() != nil {
			return true
		}
	}
	return obj.Parent() == pkg.Scope()
}

type listedPackage struct {
	Dir, ImportPath, Export string
	GoFiles                 []string
}

// listExports is `go list -export -deps` of pattern: the package itself,
// and the export data of everything it imports.
func listExports(t *testing.T, pattern string) (listedPackage, map[string]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", pattern)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export -deps %s: %v\n%s", pattern, err, stderr.String())
	}
	exports := map[string]string{}
	var last listedPackage
	dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(out)))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("read go list's answer: %v", err)
		}
		exports[p.ImportPath] = p.Export
		last = p // -deps lists the package itself last
	}
	return last, exports
}

// cycles returns the graph's strongly connected components of more than
// one file (Tarjan's algorithm), each sorted.
func (g *graph) cycles() [][]string {
	index, low := map[string]int{}, map[string]int{}
	on := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		on[v] = true
		for _, w := range sortedKeys(g.edges[v]) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			on[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if len(comp) > 1 {
			sort.Strings(comp)
			out = append(out, comp)
		}
	}
	for _, f := range g.files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return out
}

// backImports draws the files in floors (a file one floor above the
// highest it imports, leaves on the ground, following imports depth
// first in name order) and returns the imports that this drawing cannot
// honour: those that run back up, to a file still being drawn.
func (g *graph) backImports() []string {
	const (
		drawing = 1
		drawn   = 2
	)
	state := map[string]int{}
	var back []string
	var visit func(v string)
	visit = func(v string) {
		state[v] = drawing
		for _, w := range sortedKeys(g.edges[v]) {
			switch state[w] {
			case 0:
				visit(w)
			case drawing:
				back = append(back, g.edge(v, w))
			}
		}
		state[v] = drawn
	}
	for _, f := range g.files {
		if state[f] == 0 {
			visit(f)
		}
	}
	return back
}

// within lists the imports among the files of one cycle.
func (g *graph) within(comp []string) []string {
	in := map[string]bool{}
	for _, f := range comp {
		in[f] = true
	}
	var out []string
	for _, f := range comp {
		for _, to := range sortedKeys(g.edges[f]) {
			if in[to] {
				out = append(out, g.edge(f, to))
			}
		}
	}
	return out
}

// edge is one import, with what it names: "a.go -> b.go (run, stop)".
func (g *graph) edge(from, to string) string {
	names := sortedKeys(g.why[[2]string{from, to}])
	if len(names) > 6 {
		names = append(names[:6], "...")
	}
	return fmt.Sprintf("%s -> %s (%s)", from, to, strings.Join(names, ", "))
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
