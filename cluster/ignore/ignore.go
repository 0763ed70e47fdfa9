// Package ignore is the gitignore(5) matcher behind a push's exclusions
// (.droverignore and job.exclude): push decides with it what it sends, and
// the job file's checks what a push would send (a checkpoint_mirror inside
// the code directory must be excluded), so the two never disagree.
package ignore

import (
	"fmt"
	"path"
	"strings"
)

// File is the gitignore-syntax file in the code directory whose patterns
// a push skips, besides job.exclude.
const File = ".droverignore"

// StateDir is the directory at the root of a workdir where drover keeps
// its own state (push's manifest, checkpoint copies): never pushed.
const StateDir = ".drover"

// Matcher decides which paths of the code directory push skips. It follows
// gitignore(5), so that a .droverignore reads like the .gitignore users
// already write: blank lines and '#' comments are ignored, '!' re-includes,
// a trailing '/' matches directories only, a pattern with a '/' at its start
// or middle is anchored at the code directory while one without matches a
// name at any depth, '*' and '?' and '[...]' never match '/', and '**'
// matches any number of directories ("**/x", "a/**/b", "a/**"). The last
// matching pattern wins, and a file inside an excluded directory cannot be
// re-included (the directory is never walked).
//
// A handwritten matcher rather than a dependency: github.com/sabhiram/go-gitignore
// is unmaintained and mishandles "a/**" and negation, and go-git's
// gitignore package pulls in the whole of go-git.
//
// ".git" (at any depth, file or directory) and the root ".drover" directory
// (where the host keeps push's manifest) are always excluded, whatever the
// patterns say.
type Matcher struct {
	rules []rule
	// protect are slash paths (relative to the code directory) that are
	// excluded whatever the patterns say, with everything under them:
	// what push must never send, overwrite or delete (Options.Protect).
	protect []string
}

type rule struct {
	negate  bool
	dirOnly bool
	// segs are the '/'-separated parts of the pattern; "**" stands for
	// any number of path segments. An unanchored pattern starts with "**".
	segs []string
}

// NewMatcher returns a matcher with no patterns: it excludes only the
// always-excluded .git and .drover.
func NewMatcher() *Matcher { return &Matcher{} }

// BadPatternError reports a pattern that cannot be compiled. Line is the
// 1-based line in the .droverignore file, or the 1-based index in
// job.exclude.
type BadPatternError struct {
	Source  string // ".droverignore" or "job.exclude"
	Line    int
	Pattern string
}

func (e *BadPatternError) Error() string {
	return fmt.Sprintf("%s:%d: bad pattern %q (unclosed '[' or trailing '\\')", e.Source, e.Line, e.Pattern)
}

// Add appends patterns, one gitignore line each; later patterns override
// earlier ones. source names where they came from for errors.
func (m *Matcher) Add(source string, lines []string) error {
	for i, line := range lines {
		r, ok, err := parseRule(line)
		if err != nil {
			return &BadPatternError{Source: source, Line: i + 1, Pattern: line}
		}
		if ok {
			m.rules = append(m.rules, r)
		}
	}
	return nil
}

// Protect excludes rel (slash-separated, relative to the code directory)
// and everything under it, overriding every pattern, '!' included.
func (m *Matcher) Protect(rel string) { m.protect = append(m.protect, rel) }

// parseRule compiles one gitignore line; ok is false for blank lines and
// comments.
func parseRule(line string) (r rule, ok bool, err error) {
	line = strings.TrimSuffix(line, "\r")
	line = trimTrailingSpaces(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return rule{}, false, nil
	}
	if strings.HasPrefix(line, "!") {
		r.negate = true
		line = line[1:]
	} else if strings.HasPrefix(line, `\!`) || strings.HasPrefix(line, `\#`) {
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return rule{}, false, nil
	}
	anchored := strings.Contains(line, "/")
	line = strings.TrimPrefix(line, "/")
	var segs []string
	if !anchored {
		segs = append(segs, "**")
	}
	for _, s := range strings.Split(line, "/") {
		if s == "" {
			continue // "a//b" is "a/b", as in git
		}
		if s == "**" && len(segs) > 0 && segs[len(segs)-1] == "**" {
			continue
		}
		if s != "**" {
			// gitignore negates a bracket class with '!', path.Match with '^'.
			s = strings.ReplaceAll(s, "[!", "[^")
			if _, err := path.Match(s, ""); err != nil {
				return rule{}, false, err
			}
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return rule{}, false, nil
	}
	r.segs = segs
	return r, true, nil
}

// trimTrailingSpaces drops trailing spaces unless escaped with a backslash.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	if strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-2] + " "
	}
	return s
}

// Excluded reports whether rel (slash-separated, relative to the code
// directory) is skipped by push, either itself or because a directory
// above it is.
func (m *Matcher) Excluded(rel string, isDir bool) bool {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		if m.ExcludedSelf(parts[:i], true) {
			return true
		}
	}
	return m.ExcludedSelf(parts, isDir)
}

// ExcludedSelf decides for one path whose parent directories are known not
// to be excluded; the walker uses it directly because it never descends
// into an excluded directory.
func (m *Matcher) ExcludedSelf(parts []string, isDir bool) bool {
	if parts[len(parts)-1] == ".git" || (len(parts) == 1 && parts[0] == StateDir) {
		return true
	}
	if len(m.protect) > 0 {
		rel := strings.Join(parts, "/")
		for _, p := range m.protect {
			if rel == p {
				return true
			}
		}
	}
	excluded := false
	for _, r := range m.rules {
		if r.negate == !excluded {
			continue // cannot change the outcome
		}
		if r.dirOnly && !isDir {
			continue
		}
		if matchSegs(r.segs, parts) {
			excluded = !r.negate
		}
	}
	return excluded
}

// matchSegs matches pattern segments against path segments; "**" matches
// zero or more segments, except that a trailing "**" matches at least one
// ("a/**" is everything inside a, not a itself).
func matchSegs(pat, p []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			if len(pat) == 1 {
				return len(p) >= 1
			}
			for i := 0; i <= len(p); i++ {
				if matchSegs(pat[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], p[0]); !ok {
			return false
		}
		pat, p = pat[1:], p[1:]
	}
	return len(p) == 0
}
