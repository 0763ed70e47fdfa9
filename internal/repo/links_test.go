package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLink is an inline Markdown link or image: [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
)

// prose returns a Markdown file's lines outside fenced code blocks, with
// inline code blanked, so that only real links and headings remain.
func prose(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out = append(out, "")
			continue
		}
		out = append(out, codeSpan.ReplaceAllString(line, "``"))
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation dropped, spaces as hyphens, "-1", "-2"
// after repeats.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// docFiles is README.md and every page in docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	r := root(t)
	pages, err := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", r, err)
	}
	return append([]string{filepath.Join(r, "README.md")}, pages...)
}

// TestDocLinksResolve: every relative link in README.md and docs/ names a
// file of the repository, and every #anchor a heading of its page. The
// manual is split over many pages; a page renamed or a heading reworded
// must not leave a reader at a dead link.
func TestDocLinksResolve(t *testing.T) {
	r := root(t)
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(r, file)
		for n, line := range prose(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				if msg := checkLink(file, string(b), m[1]); msg != "" {
					t.Errorf("%s:%d: link %s: %s", rel, n+1, m[1], msg)
				}
			}
		}
	}
}

// checkLink says what is wrong with target, a link in file (whose text is
// md), or "" when it resolves. Links to other sites are not followed.
func checkLink(file, md, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	dest, text := file, md
	if path != "" {
		if filepath.IsAbs(path) {
			return "absolute path: write it relative to this file"
		}
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		fi, err := os.Stat(dest)
		if err != nil {
			return "no such file"
		}
		if anchor == "" || fi.IsDir() || !strings.HasSuffix(dest, ".md") {
			return ""
		}
		b, err := os.ReadFile(dest)
		if err != nil {
			return err.Error()
		}
		text = string(b)
	}
	if anchor != "" && !anchors(text)[anchor] {
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, filepath.Base(dest))
	}
	return ""
}

// TestAnchors pins the heading-to-anchor rule the link check relies on
// against examples of what GitHub renders.
func TestAnchors(t *testing.T) {
	got := anchors("# drover\n## From a hand-run fleet to Slurm\n```\n# not a heading\n```\n### drover exec and Ctrl-C\n## Hosts of any Linux\n## Hosts of any Linux\n")
	for _, want := range []string{"drover", "from-a-hand-run-fleet-to-slurm", "drover-exec-and-ctrl-c", "hosts-of-any-linux", "hosts-of-any-linux-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line in a code block became an anchor: %v", got)
	}
}

// maxReadmeLines keeps the README a front door: what drover is, the two
// commands, install, a job for three hosts, its plan, running it, the
// command table and the way into docs/. The manual lives in docs/ (the
// README was 742 lines before it moved there).
const maxReadmeLines = 250

func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md is %d lines (at most %d): move the detail into a page of docs/ and link it", n, maxReadmeLines)
	}
	if !strings.HasPrefix(string(b), "# drover\n\n```sh\nmake demo ") || !strings.Contains(string(b), "\nmake test ") {
		t.Errorf("README.md must start with the two commands, make demo and make test")
	}
}

// readmeCommand is a `command = [...]` line of a job in README.md or
// docs/job-file.md that runs train.py.
var readmeCommand = regexp.MustCompile(`command = \[("python3", "train\.py"[^\]]*)\]`)

// TestDocJobsMatchExampleScript: the jobs README.md and docs/job-file.md
// show run train.py, examples/pytorch-ddp/train.py as README.md points to
// it: every flag they pass is one that script takes (a newcomer copies
// the job and the script together).
func TestDocJobsMatchExampleScript(t *testing.T) {
	r := root(t)
	script, err := os.ReadFile(filepath.Join(r, "examples", "pytorch-ddp", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"README.md", filepath.Join("docs", "job-file.md")} {
		b, err := os.ReadFile(filepath.Join(r, doc))
		if err != nil {
			t.Fatal(err)
		}
		ms := readmeCommand.FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s: no job running train.py found", doc)
		}
		for _, m := range ms {
			for _, arg := range strings.Split(m[1], ",") {
				arg = strings.Trim(strings.TrimSpace(arg), `"`)
				if strings.HasPrefix(arg, "--") && !strings.Contains(string(script), `add_argument("`+arg+`"`) {
					t.Errorf("%s: the job passes %s, which examples/pytorch-ddp/train.py does not take", doc, arg)
				}
			}
		}
	}
}
