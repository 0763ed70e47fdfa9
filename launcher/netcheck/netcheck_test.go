package netcheck

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

// netPeers are peers named as given, for summarise.
func netPeers(names ...string) []*netPeer {
	out := make([]*netPeer, len(names))
	for i, n := range names {
		out[i] = &netPeer{host: config.Host{Name: n}}
	}
	return out
}

// A host whose every outgoing link is slow is the slowest, though each
// other host also has one slow incoming link (from it): the medians
// tell the two apart. A host nothing could be measured to or from is
// below any bandwidth.
func TestNetSummariseAttributes(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	rep := &Report{}
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			bps := 9e9
			if from == "c" {
				bps = 50e6
			}
			rep.Links = append(rep.Links, Link{From: from, To: to, BitsPerSec: bps, RTTMicros: 20})
		}
	}
	rep.summarise(netPeers(names...), make([]error, 4))
	assert.Equal(t, "c", rep.Slowest)
	c := rep.HostNamed("c")
	assert.Equal(t, 50e6, c.Rate)
	assert.Equal(t, 50e6, c.Out)
	assert.Equal(t, 9e9, c.In)
	assert.Equal(t, 9e9, rep.HostNamed("d").Rate, "one slow link in of three leaves the median alone")

	bad := rep.Below(100e6)
	require.Len(t, bad, 1)
	assert.Equal(t, "c", bad[0].Name)
	assert.Empty(t, rep.Below(0), "no min_bandwidth: only unmeasured hosts fail")

	err := CheckMinBandwidth(rep, 100e6)
	var ne *SlowError
	require.True(t, errors.As(err, &ne))
	assert.Contains(t, err.Error(), "c runs at 50.000 Mbit/s (out 50.000 Mbit/s, in 9.000 Gbit/s), below min_bandwidth 100.000 Mbit/s")

	rep2 := &Report{Links: []Link{{From: "a", To: "b", Err: "refused"}, {From: "b", To: "a", Err: "refused"}}}
	rep2.summarise(netPeers("a", "b"), []error{nil, errors.New("listener did not start")})
	require.Len(t, rep2.Below(0), 2)
	assert.Equal(t, "listener did not start", rep2.HostNamed("b").Err)
}

func TestNamedIface(t *testing.T) {
	assert.Equal(t, "eth1", namedIface(map[string]string{"NCCL_SOCKET_IFNAME": "=eth1"}))
	assert.Equal(t, "ib0", namedIface(map[string]string{"GLOO_SOCKET_IFNAME": "ib0,ib1"}))
	assert.Equal(t, "", namedIface(map[string]string{"NCCL_SOCKET_IFNAME": "^docker,lo"}))
	assert.Equal(t, "", namedIface(nil))
}
