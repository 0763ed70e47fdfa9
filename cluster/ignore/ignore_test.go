package ignore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMatcher(t *testing.T) {
	type check struct {
		path     string
		isDir    bool
		excluded bool
	}
	tests := []struct {
		name     string
		patterns []string
		checks   []check
	}{
		{"always excluded", nil, []check{
			{".git", true, true}, {".git/HEAD", false, true}, {"sub/.git", false, true}, {"sub/.git/x", false, true},
			{".drover", true, true}, {".drover/manifest.json", false, true},
			{"sub/.drover", true, false}, {".gitignore", false, false}, {"a.git", false, false},
		}},
		{"git cannot be re-included", []string{"!.git", "!.git/", "!.drover"}, []check{
			{".git", true, true}, {".drover", true, true},
		}},
		{"basename at any depth", []string{"*.pyc"}, []check{
			{"a.pyc", false, true}, {"x/y/a.pyc", false, true}, {"a.py", false, false}, {"pyc", false, false},
		}},
		{"star does not cross slash", []string{"/src/*.py"}, []check{
			{"src/a.py", false, true}, {"src/sub/a.py", false, false}, {"a.py", false, false},
		}},
		{"leading slash anchors", []string{"/build"}, []check{
			{"build", true, true}, {"build/x", false, true}, {"src/build", true, false},
		}},
		{"middle slash anchors", []string{"doc/frotz"}, []check{
			{"doc/frotz", true, true}, {"a/doc/frotz", true, false},
		}},
		{"trailing slash is directories only", []string{"data/"}, []check{
			{"data", true, true}, {"data", false, false}, {"x/data", true, true}, {"x/data/f", false, true},
		}},
		{"negation, last match wins", []string{"*.log", "!keep.log", "keep.log.d/"}, []check{
			{"a.log", false, true}, {"keep.log", false, false}, {"sub/keep.log", false, false},
		}},
		{"negation then exclusion again", []string{"*.txt", "!*.txt", "secret.txt"}, []check{
			{"a.txt", false, false}, {"secret.txt", false, true},
		}},
		{"file in excluded dir cannot be re-included", []string{"out/", "!out/keep"}, []check{
			{"out/keep", false, true}, {"out", true, true},
		}},
		{"dir/** excludes contents, not the dir", []string{"out/**", "!out/keep"}, []check{
			{"out", true, false}, {"out/a", false, true}, {"out/a/b", false, true}, {"out/keep", false, false},
		}},
		{"leading **", []string{"**/cache"}, []check{
			{"cache", true, true}, {"a/b/cache", true, true}, {"a/b/cache/x", false, true}, {"cachex", true, false},
		}},
		{"middle **", []string{"a/**/b"}, []check{
			{"a/b", false, true}, {"a/x/b", false, true}, {"a/x/y/b", false, true}, {"x/a/b", false, false},
		}},
		{"question mark and classes", []string{"file?.txt", "[ab].py", "[!c]x.go"}, []check{
			{"file1.txt", false, true}, {"file10.txt", false, false}, {"a.py", false, true}, {"c.py", false, false},
			{"dx.go", false, true}, {"cx.go", false, false},
		}},
		{"comments blanks and escapes", []string{"# comment", "", "   ", `\#notcomment`, `\!bang`, "trail   ", `sp\ `}, []check{
			{"# comment", false, false}, {"#notcomment", false, true}, {"!bang", false, true},
			{"trail", false, true}, {"sp ", false, true}, {"sp", false, false},
		}},
		{"windows line endings", []string{"*.tmp\r"}, []check{{"a.tmp", false, true}}},
		{"double star alone", []string{"**"}, []check{{"a", false, true}, {"a/b", true, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMatcher()
			require.NoError(t, m.Add("test", tc.patterns))
			for _, c := range tc.checks {
				assert.Equal(t, c.excluded, m.Excluded(c.path, c.isDir), "Excluded(%q, dir=%v) with %q", c.path, c.isDir, tc.patterns)
			}
		})
	}
}

func TestMatcherBadPattern(t *testing.T) {
	m := NewMatcher()
	err := m.Add(".droverignore", []string{"ok", "# fine", "src/[abc"})
	var bp *BadPatternError
	require.ErrorAs(t, err, &bp)
	assert.Equal(t, 3, bp.Line)
	assert.Equal(t, "src/[abc", bp.Pattern)
	assert.Contains(t, err.Error(), ".droverignore:3:")
}
