package repo

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// apart lists packages (directories) that must not depend, even through
// other packages of the module, on the packages after them. Data flows
// one way: the transports reach hosts described by a cluster.Endpoint,
// and the job file (cluster/config) converts its hosts to that, so a
// transport never learns the job file's shape; the push takes a push.Job
// and reports a bad pattern as its own error, which the launcher makes
// the job file's ConfigError; gpu knows GPUs, not hosts or jobs, and
// selects by a gpu.Policy the launcher builds.
var apart = map[string][]string{
	"cluster":               {"cluster/config"},
	"cluster/transporttest": {"cluster/config"},
	"cluster/ignore":        {"cluster/config"},
	"cluster/push":          {"cluster/config"},
	"gpu":                   {"cluster/config"},
}

// TestPackagesStayApart walks each package of apart through its shipped
// (non-test) imports within the module, as `go list -deps` would, and
// fails naming the chain that reaches a forbidden package.
func TestPackagesStayApart(t *testing.T) {
	graph := moduleImports(t)
	for from, banned := range apart {
		if _, ok := graph[from]; !ok {
			t.Errorf("package %s of apart has no Go files: update the table", from)
			continue
		}
		for _, to := range banned {
			if chain := importChain(graph, from, to); chain != nil {
				t.Errorf("%s imports %s (through %s): pass what it needs as its own type (see cluster.Endpoint) and convert in the caller",
					from, to, strings.Join(chain, " -> "))
			}
		}
	}
}

// moduleImports maps each directory of the module to the directories of
// the module its non-test files import, whatever their build tags (an
// import under any GOOS is still a dependency).
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	mod := modulePath(t)
	fset := token.NewFileSet()
	graph := map[string][]string{}
	for dir, files := range goDirs(t) {
		seen := map[string]bool{}
		for _, p := range files {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("parse %s: %v", p, err)
			}
			for _, im := range f.Imports {
				path, err := strconv.Unquote(im.Path.Value)
				if err != nil {
					t.Fatalf("%s: import %s: %v", p, im.Path.Value, err)
				}
				if rel, ok := strings.CutPrefix(path, mod+"/"); ok && !seen[rel] {
					seen[rel] = true
					graph[dir] = append(graph[dir], rel)
				}
			}
		}
		if _, ok := graph[dir]; !ok && len(seen) == 0 {
			graph[dir] = nil
		}
		sort.Strings(graph[dir])
	}
	return graph
}

// importChain returns the packages from from to to, both included, along
// the first import path found (depth first), or nil when to is not among
// from's dependencies.
func importChain(graph map[string][]string, from, to string) []string {
	visited := map[string]bool{}
	var walk func(p string) []string
	walk = func(p string) []string {
		if p == to {
			return []string{p}
		}
		if visited[p] {
			return nil
		}
		visited[p] = true
		for _, q := range graph[p] {
			if rest := walk(q); rest != nil {
				return append([]string{p}, rest...)
			}
		}
		return nil
	}
	return walk(from)
}

// modulePath is the module line of the repository's go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod has no module line")
	return ""
}

// The launcher tree (issue 35): cmd/drover wires the run core (launcher)
// and the verbs (runview, top, topview, fanout, netcheck); both build on
// the host I/O they share (hostio), which builds on neither. Only
// cmd/drover imports the core, so that a verb never grows a back door
// into the run's types; the core measures links through netcheck for
// preflight = ["net"], the one verb it uses.
var (
	coreOnlyFrom = []string{"cmd/drover"}
	verbs        = []string{"launcher/runview", "launcher/top", "launcher/topview", "launcher/fanout", "launcher/netcheck"}
	leaves       = []string{"launcher/hostio", "launcher/agent/remote", "launcher/cause", "launcher/restart"}
)

// TestLauncherTreeOneWay fails naming the chain when a package other than
// cmd/drover imports the core, when a verb reaches the core or another
// verb's package it does not build on, or when a leaf reaches the core or
// a verb.
func TestLauncherTreeOneWay(t *testing.T) {
	graph := moduleImports(t)
	for dir, imports := range graph {
		if strings.HasPrefix(dir, "internal") || strings.HasSuffix(dir, "_test") {
			continue
		}
		for _, im := range imports {
			if im == "launcher" && !slices.Contains(coreOnlyFrom, dir) {
				t.Errorf("%s imports the run core (launcher): only cmd/drover may; move what it needs down into launcher/hostio", dir)
			}
		}
	}
	for _, v := range verbs {
		if chain := importChain(graph, v, "launcher"); chain != nil {
			t.Errorf("verb %s reaches the run core through %s", v, strings.Join(chain, " -> "))
		}
	}
	for _, l := range leaves {
		for _, up := range append([]string{"launcher"}, verbs...) {
			if chain := importChain(graph, l, up); chain != nil {
				t.Errorf("%s, a leaf of the launcher tree, reaches %s through %s", l, up, strings.Join(chain, " -> "))
			}
		}
	}
}
