package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateLayout = flag.Bool("update-layout", false, "rewrite docs/architecture.md's Layout table from go list")

const (
	module      = "github.com/droverhq/drover/"
	layoutBegin = "<!-- layout: made by `go test ./cmd/drover -run TestLayoutTable -update-layout` from go list; do not edit -->\n"
	layoutEnd   = "<!-- /layout -->\n"
)

// pkgInfo is one package of the module as go list sees it.
type pkgInfo struct {
	path, doc string
	imports   []string // the module's own packages only
}

// listPackages runs go list over the whole module.
func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{.Doc}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	pkgs := map[string]pkgInfo{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		require.Len(t, f, 3, line)
		p := pkgInfo{path: strings.TrimPrefix(f[0], module), doc: f[2]}
		for _, imp := range strings.Fields(f[1]) {
			if strings.HasPrefix(imp, module) {
				p.imports = append(p.imports, strings.TrimPrefix(imp, module))
			}
		}
		pkgs[p.path] = p
	}
	return pkgs
}

// layered orders packages so that each comes after everything it
// imports (ties alphabetically): reading the table down is reading the
// data flow.
func layered(pkgs map[string]pkgInfo) []pkgInfo {
	var out []pkgInfo
	done := map[string]bool{}
	for len(out) < len(pkgs) {
		var ready []string
		for path, p := range pkgs {
			if !done[path] && !slices.ContainsFunc(p.imports, func(i string) bool { return !done[i] }) {
				ready = append(ready, path)
			}
		}
		slices.Sort(ready)
		for _, path := range ready {
			done[path] = true
			out = append(out, pkgs[path])
		}
	}
	return out
}

func layoutTable(pkgs []pkgInfo) string {
	var b strings.Builder
	b.WriteString(layoutBegin)
	b.WriteString("| package | what it owns | imports |\n|---|---|---|\n")
	for _, p := range pkgs {
		imps := "-"
		if len(p.imports) > 0 {
			imps = "`" + strings.Join(p.imports, "`, `") + "`"
		}
		b.WriteString("| `" + p.path + "` | " + strings.ReplaceAll(p.doc, "|", `\|`) + " | " + imps + " |\n")
	}
	b.WriteString(layoutEnd)
	return b.String()
}

// TestLayoutTable keeps the Layout table of docs/architecture.md (the
// package map) equal to what go list says: every package, its doc's first sentence and the module packages it
// imports, in data-flow order.
func TestLayoutTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	want := layoutTable(layered(listPackages(t)))
	docPath := filepath.Join("..", "..", "docs", "architecture.md")
	b, err := os.ReadFile(docPath)
	require.NoError(t, err)
	i, j := bytes.Index(b, []byte(layoutBegin)), bytes.Index(b, []byte(layoutEnd))
	require.True(t, i >= 0 && j > i, "docs/architecture.md has no layout block")
	if *updateLayout {
		b = slices.Concat(b[:i], []byte(want), b[j+len(layoutEnd):])
		require.NoError(t, os.WriteFile(docPath, b, 0o644))
		return
	}
	assert.Equal(t, want, string(b[i:j+len(layoutEnd)]), "docs/architecture.md's Layout is stale: go test ./cmd/drover -run TestLayoutTable -update-layout")
}

// TestLayering: the transports and the job file know nothing of GPUs,
// plans or supervision, and GPU code knows nothing of the launcher, so
// data flows one way: cluster -> gpu -> launcher -> cmd.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	below := map[string][]string{
		"cluster": {"gpu", "launcher", "cmd"},
		"gpu":     {"launcher", "cmd"},
	}
	for path, p := range listPackages(t) {
		top, _, _ := strings.Cut(path, "/")
		if strings.HasSuffix(path, "testfleet") || strings.HasSuffix(path, "transporttest") {
			continue // test support may drive anything
		}
		for _, imp := range p.imports {
			impTop, _, _ := strings.Cut(imp, "/")
			assert.NotContains(t, below[top], impTop, "%s imports %s: data flows cluster -> gpu -> launcher -> cmd", path, imp)
			// GPU code reads job settings, never hosts: reaching a
			// host to probe it is launcher/agent/remote's job.
			if top == "gpu" && impTop == "cluster" {
				assert.Equal(t, "cluster/config", imp, "%s imports %s: gpu has no transport knowledge", path, imp)
			}
		}
	}
}
