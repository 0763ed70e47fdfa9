package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDDPSecondNIC: on hosts with a second interface that carries the
// default route and that their host names resolve to, but that the other
// hosts cannot reach (the cluster network is eth0), gloo left to itself
// advertises the unreachable address and DDP hangs. drover finds on each
// host the interface whose route reaches MASTER_ADDR, shows it in `drover
// plan --probe`, and sets GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to it:
// real DDP over gloo trains to the end with no NIC setting in the job.
func TestDDPSecondNIC(t *testing.T) {
	needFleet(t)
	require.NoError(t, fleet.SecondNIC(true))
	t.Cleanup(func() { assert.NoError(t, fleet.SecondNIC(false)) })
	out, err := fleet.Exec(0, "getent", "hosts", fleet.Hosts[1].Name)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(out), "10.232."), "host names resolve to the unreachable network: %s", out)

	j := newFleetJob(t, "pytorch")
	job, err := os.ReadFile(j.jobPath())
	require.NoError(t, err)
	require.NotContains(t, string(job), "IFNAME")
	r := startDrover(t, j.dir, "plan", "--probe", j.jobPath())
	require.Equal(t, 0, r.wait(t), r.output())
	plan, err := os.ReadFile(filepath.Join(j.dir, "drover.stdout"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^PROCESS .* NIC$`, string(plan))
	assert.Len(t, regexp.MustCompile(`(?m)^worker-\d+ .* eth0$`).FindAllString(string(plan), -1), fleetHosts*procsPerHst, "%s", plan)

	runUndisturbed(t, "pytorch")
}
