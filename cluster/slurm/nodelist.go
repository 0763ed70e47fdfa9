package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNodes bounds what one node list may expand to, so that a malformed or
// hostile SLURM_JOB_NODELIST ("n[0-99999999999]") is an error, not an
// exhausted memory.
const MaxNodes = 1 << 16

// NodelistError says why a Slurm node list could not be expanded.
type NodelistError struct {
	List string
	Msg  string
}

func (e *NodelistError) Error() string {
	return fmt.Sprintf("expand Slurm node list %q: %s", e.List, e.Msg)
}

// ExpandNodelist expands a Slurm host list ("gpu[01-03,07],cpu5") into host
// names in order, as `scontrol show hostnames` prints them, without
// needing scontrol: drover plans inside an allocation from the environment
// alone. Ranges keep the zero padding of their lower bound ("n[008-010]":
// n008 n009 n010), several bracket groups multiply ("r[1-2]-n[1-2]": r1-n1
// r1-n2 r2-n1 r2-n2), and commas or spaces outside brackets separate
// entries. Empty entries are skipped; duplicates are kept, as scontrol does.
func ExpandNodelist(list string) ([]string, error) {
	entries, err := splitTop(list)
	if err != nil {
		return nil, &NodelistError{List: list, Msg: err.Error()}
	}
	var names []string
	for _, e := range entries {
		got, err := expandEntry(e, MaxNodes-len(names))
		if err != nil {
			return nil, &NodelistError{List: list, Msg: err.Error()}
		}
		names = append(names, got...)
	}
	return names, nil
}

// splitTop splits list at commas and spaces outside brackets.
func splitTop(list string) ([]string, error) {
	var entries []string
	depth, start := 0, 0
	for i, c := range list {
		switch c {
		case '[':
			if depth++; depth > 1 {
				return nil, fmt.Errorf("nested '[' at byte %d", i)
			}
		case ']':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("']' without '[' at byte %d", i)
			}
		case ',', ' ', '\t', '\n':
			if depth == 0 {
				if i > start {
					entries = append(entries, list[start:i])
				}
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("'[' without ']'")
	}
	if start < len(list) {
		entries = append(entries, list[start:])
	}
	return entries, nil
}

// expandEntry expands one entry such as "r[1-2]-n[01-03]" into at most
// limit names.
func expandEntry(entry string, limit int) ([]string, error) {
	names := []string{""}
	rest := entry
	for rest != "" {
		open := strings.IndexByte(rest, '[')
		if open < 0 {
			names = appendEach(names, []string{rest})
			break
		}
		end := strings.IndexByte(rest, ']')
		nums, err := expandRanges(rest[open+1:end], limit)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", entry, err)
		}
		if len(names)*len(nums) > limit {
			return nil, fmt.Errorf("entry %q: more than %d names", entry, MaxNodes)
		}
		names = appendEach(appendEach(names, []string{rest[:open]}), nums)
		rest = rest[end+1:]
	}
	return names, nil
}

// appendEach returns every prefix followed by every suffix, prefixes
// varying slowest.
func appendEach(prefixes, suffixes []string) []string {
	out := make([]string, 0, len(prefixes)*len(suffixes))
	for _, p := range prefixes {
		for _, s := range suffixes {
			out = append(out, p+s)
		}
	}
	return out
}

// expandRanges expands the inside of brackets, "01-03,07", into numbers
// padded to the width of each range's lower bound.
func expandRanges(inner string, limit int) ([]string, error) {
	var out []string
	for _, r := range strings.Split(inner, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		l, errL := strconv.ParseUint(lo, 10, 32)
		h, errH := strconv.ParseUint(hi, 10, 32)
		if errL != nil || errH != nil {
			return nil, fmt.Errorf("invalid range %q (want N or N-M with digits only)", r)
		}
		if h < l {
			return nil, fmt.Errorf("invalid range %q (upper bound below lower)", r)
		}
		if left := limit - len(out); left <= 0 || h-l >= uint64(left) {
			return nil, fmt.Errorf("range %q: more than %d names", r, MaxNodes)
		}
		for n := l; n <= h; n++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), n))
		}
	}
	return out, nil
}
