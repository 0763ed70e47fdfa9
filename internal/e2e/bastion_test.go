package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// TestBastionExecPushRun: hosts reached through a ProxyJump host whose
// sshd lets one connection at a time authenticate (MaxStartups 1:100:2:
// while one is, every new one is dropped) are all reached by drover exec,
// push and run. Each command logs in to the bastion once and goes through
// that connection to every host, instead of one handshake per host for
// MaxStartups to drop.
func TestBastionExecPushRun(t *testing.T) {
	fleettest.Need(t, fleet)
	require.NoError(t, fleet.SetSSHD(0, "MaxStartups 1:100:2\n"))
	t.Cleanup(func() { assert.NoError(t, fleet.SetSSHD(0, "")) })
	bastion := fleet.ClusterHosts()[0].Address
	j := kit.NewFleetJob(t, kit.JobSpec{Script: `echo "ran on $(hostname) from ${SSH_CONNECTION%% *}"`})
	hosts := fleet.ClusterHosts()[1:]
	for i := range hosts {
		hosts[i].ProxyJump = fleet.User + "@" + bastion
	}
	kit.WriteInventory(t, j.Inventory, hosts)
	sshdLog := filepath.Join(filepath.Dir(fleet.HostKeyFile(0)), "sshd.log")
	logins := func() int {
		data, err := os.ReadFile(sshdLog)
		require.NoError(t, err)
		return strings.Count(string(data), "Accepted publickey")
	}

	before := logins()
	d := kit.StartDroverArgs(t, j, "exec", j.Path, "--", "hostname")
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	for _, h := range hosts {
		assert.Contains(t, d.Stdout.String(), "] "+h.Name+"\n")
	}
	assert.Equal(t, 1, logins()-before, "drover exec: one login on the bastion")

	before = logins()
	d = kit.StartDroverArgs(t, j, "push", j.Path)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	assert.Equal(t, 1, logins()-before, "drover push: one login on the bastion")

	before = logins()
	d = kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), d.Stderr.String())
	for _, h := range hosts {
		assert.Contains(t, d.Stdout.String(), "ran on "+h.Name+" from "+bastion+"\n", "through the bastion")
	}
	assert.Equal(t, 1, logins()-before, "drover run: one login on the bastion")
}
