package launcher

import (
	"fmt"
	"io"
	"strings"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// WriteVersion writes `drover version`: this build (agent.WriteVersion:
// version, commit, Go release, platform), then, for each platform, the
// agent that hosts of it would get from the drover binary at self and what
// that agent answers to `drover agent version`. An agent built from
// another commit than drover is the first thing to rule out when a host
// misbehaves after an upgrade.
func WriteVersion(w io.Writer, self string) error {
	if err := agent.WriteVersion(w); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, strings.Join(remote.FindAgents(self).Describe(), "\n"))
	return err
}
