package main

import (
	"strings"
	"testing"
)

// TestWriteDocKeepsMeasuredOutside: a new run keeps the section of the old
// file from the marker on (figures from fleet tests) and replaces the rest.
func TestWriteDocKeepsMeasuredOutside(t *testing.T) {
	old := "# drover benchmarks\n\nold results\n\n" + keptMarker + "\n## Bastion\n\n| 64 | 1.8 s |\n"
	var b strings.Builder
	if err := WriteDoc(&b, Doc{Command: "make bench", Kept: keptSection(old)}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if strings.Contains(got, "old results") || !strings.HasSuffix(got, "\n"+keptMarker+"\n## Bastion\n\n| 64 | 1.8 s |\n") {
		t.Errorf("kept section lost or old results kept:\n%s", got)
	}
	if keptSection("no marker") != "" {
		t.Error("a file without the marker keeps nothing")
	}
}
