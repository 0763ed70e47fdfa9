package hostio

import (
	"fmt"
	"path"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// Conn is a connection to one host of a job: the host as the inventory
// names it, its transport, its file access (nil when not opened), the
// home directory relative paths resolve against, and the drover binary
// the agent runs as there ("" before it was installed).
type Conn struct {
	Host      config.Host
	T         cluster.Transport
	FS        cluster.FS
	Home      string
	AgentPath string
}

// Agent is c's agent: the commands the controller runs there.
func (c *Conn) Agent() remote.Client { return remote.Client{T: c.T, Path: c.AgentPath} }

// Label names h in messages: its name and address.
func Label(h config.Host) string {
	if h.Transport == config.TransportLocal {
		return h.Name + " (local)"
	}
	return fmt.Sprintf("%s (%s)", h.Name, h.Address)
}

// Abs is p on a host whose home is home: relative paths (a workdir, say)
// are the home's.
func Abs(home, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(home, p)
}
