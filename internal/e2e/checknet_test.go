package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/netcheck"
)

// limitEgress limits what fleet host i sends to rate with a token bucket
// on its interface, inside its namespace, until the test ends.
func limitEgress(t *testing.T, i int, rate string) {
	t.Helper()
	testenv.LookPath(t, "tc")
	out, err := fleet.Exec(i, "ip", "-o", "-4", "addr", "show")
	require.NoError(t, err)
	dev := ""
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && strings.HasPrefix(f[3], fleet.Hosts[i].Addr+"/") {
			dev = f[1]
		}
	}
	require.NotEmpty(t, dev, "no interface of %s has %s:\n%s", fleet.Hosts[i].Name, fleet.Hosts[i].Addr, out)
	_, err = fleet.Exec(i, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.Exec(i, "tc", "qdisc", "del", "dev", dev, "root"); err != nil {
			t.Errorf("remove the limit on %s: %v", fleet.Hosts[i].Name, err)
		}
	})
}

// checkNet runs `drover check net ARGS JOB` and returns its exit status,
// stdout and stderr.
func checkNet(t *testing.T, j *kit.FleetJob, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(kit.DroverBinary(t), append(append([]string{"check", "net"}, args...), j.Path)...)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(j.Dir, "home"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "drover check net: %s", stderr.String())
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// One of four hosts sends at 50 Mbit/s (tc tbf in its namespace): check
// net names it the slowest, measures it within 20% of that, and with
// min_bandwidth above it exits 1 naming it.
func TestCheckNetNamesSlowHost(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: "true"})
	limitEgress(t, 2, "50mbit")
	slow := fleet.Hosts[2].Name

	code, out, stderr := checkNet(t, j, "--json")
	require.Equal(t, 0, code, "without min_bandwidth nothing fails:\n%s\n%s", out, stderr)
	var rep netcheck.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Hosts, 4)
	assert.Len(t, rep.Links, 12, "every ordered pair")
	assert.Equal(t, slow, rep.Slowest, "%+v", rep.Hosts)
	for _, h := range rep.Hosts {
		assert.Empty(t, h.Err, h.Name)
		assert.Equal(t, "eth0", h.Iface, "the interface toward the rendezvous host, %s", h.Name)
		if h.Name == slow {
			assert.InEpsilon(t, 50e6, h.Rate, 0.2, "measured %.0f bit/s", h.Rate)
		} else {
			assert.Greater(t, h.Rate, 100e6, h.Name)
		}
	}

	j2 := kit.NewFleetJob(t, kit.JobSpec{Script: "true", Job: `min_bandwidth = "100Mbit"`})
	code, out, stderr = checkNet(t, j2, "--duration", "1s")
	assert.Equal(t, 1, code, "%s\n%s", out, stderr)
	t.Logf("drover check net:\n%s", out)
	assert.Contains(t, out, "slowest: "+slow)
	assert.Regexp(t, slow+` runs at [0-9.]+ Mbit/s .*below min_bandwidth 100.000 Mbit/s`, stderr)
	for i, h := range fleet.Hosts {
		if i != 2 {
			assert.NotContains(t, stderr, h.Name+" runs at", "only the slow host fails")
		}
	}
}

// preflight = ["net"]: a host under min_bandwidth is swapped for the
// spare before anything starts, and the job runs on the others; without
// a spare the run fails before anything starts, naming the host.
func TestRunPreflightNetSwapsSlowHost(t *testing.T) {
	fleettest.Need(t, fleet)
	limitEgress(t, 2, "50mbit")
	slow := fleet.Hosts[2].Name
	spec := kit.JobSpec{Script: `echo "rank=$RANK host=$DROVER_HOST"`, Job: "min_bandwidth = \"100Mbit\"\npreflight = [\"net\"]"}
	j := kit.NewFleetJob(t, spec)
	hosts := fleet.ClusterHosts()
	hosts[3].Spare = true
	kit.WriteInventory(t, j.Inventory, hosts)
	d := kit.StartDrover(t, j)
	require.Equal(t, 0, d.Wait(t, 120*time.Second), "stderr:\n%s", d.Stderr.String())
	stderr := d.Stderr.String()
	assert.Contains(t, stderr, "network check: slowest host "+slow)
	assert.Contains(t, stderr, slow+" kept out by the network check; replaced by spare "+fleet.Hosts[3].Name)
	var ran []string
	for r := range 3 {
		m := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(j.LogFile(t, 1, fmt.Sprintf("worker-%d", r)))
		require.NotNil(t, m, "rank %d", r)
		ran = append(ran, m[1])
	}
	assert.ElementsMatch(t, []string{fleet.Hosts[0].Name, fleet.Hosts[1].Name, fleet.Hosts[3].Name}, ran)

	j2 := kit.NewFleetJob(t, spec)
	kit.WriteInventory(t, j2.Inventory, fleet.ClusterHosts()[:3])
	d = kit.StartDrover(t, j2)
	assert.Equal(t, 1, d.Wait(t, 120*time.Second), "stderr:\n%s", d.Stderr.String())
	assert.Regexp(t, slow+` runs at [0-9.]+ Mbit/s .*below min_bandwidth .*keeps `+slow+` out: no spare host left`, d.Stderr.String())
	assert.NotContains(t, d.Stdout.String(), "rank=", "nothing started")
}
