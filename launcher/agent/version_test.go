package agent

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// drover version names the full commit, a modified tree and the Go
// release, after the line the installer compares.
func TestVersionText(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-26T12:00:00Z"},
	}}
	line := versionLine(bi, "linux", "arm64")
	assert.Equal(t, "drover (devel)+0123456789ab-dirty linux/arm64", line)
	assert.Equal(t, line+"\n"+
		"commit: 0123456789abcdef0123456789abcdef01234567 (modified tree), committed 2026-11-26T12:00:00Z\n"+
		"go: go1.26.1\n", versionText(line, bi))
	bi.Settings = nil
	assert.Contains(t, versionText("drover (devel) linux/amd64", bi), "commit: unknown (built without VCS stamping")
}
