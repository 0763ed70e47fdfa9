package push

import "github.com/droverhq/drover/cluster/ignore"

// Matcher decides which paths of the code directory push skips
// (ignore.Matcher: gitignore(5) rules, .git and .drover always).
type Matcher = ignore.Matcher

// BadPatternError reports a pattern that cannot be compiled.
type BadPatternError = ignore.BadPatternError

// NewMatcher returns a matcher with no patterns.
func NewMatcher() *Matcher { return ignore.NewMatcher() }
