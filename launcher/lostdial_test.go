package launcher

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// TestDialFirstBoundsALostHost: on the restart after a host's connection
// was lost, the first dial of that host is bounded by host_wait (here 1s)
// rather than the connect timeout (30s), so that a lost host costs about
// host_wait before its spare takes over; other hosts keep the configured
// timeout, and the next attempt forgets the loss.
func TestDialFirstBoundsALostHost(t *testing.T) {
	// A host that accepts TCP and never answers SSH: a handshake that
	// can only time out, and the error says after how long.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	silent := config.Host{Name: "h0", Address: "127.0.0.1", Port: port, User: "u", Transport: config.TransportSSH,
		IdentityFile: filepath.Join(dir, "id"), KnownHosts: filepath.Join(dir, "known_hosts")}
	local := config.Host{Name: "here", Address: "local", Transport: config.TransportLocal}

	r := newRunner(RunOptions{Dial: cluster.DialOptions{ConnectTimeout: 30 * time.Second, AgentSocket: "-"}})
	a := newPhases(&attempt{r: r, cfg: &config.Config{Job: config.Job{HostWait: time.Second}}}).connect
	r.noteLost("h0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // ends the test if the bound is missing
	defer cancel()
	ts, errs := a.dialFirst(ctx, []config.Host{local, silent}, r.opts.Dial, r.takeLost())
	require.NoError(t, errs[0])
	ts[0].Close()
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "timed out after 1s")
	assert.True(t, cluster.IsUnreachable(errs[1]), "%v", errs[1])
}

// TestConnectUnresolvableFailsAtOnce: on the first attempt a host whose
// address does not resolve (a typo; .invalid never does) fails the run at
// once, naming the host and the name, instead of waiting host_wait (here
// 5 minutes, the default) for a name that will not appear.
func TestConnectUnresolvableFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	typo := config.Host{Name: "gpu-a", Address: "gpu-typo.invalid", Port: 22, User: "u", Transport: config.TransportSSH,
		IdentityFile: filepath.Join(dir, "id"), KnownHosts: filepath.Join(dir, "known_hosts")}
	r := newRunner(RunOptions{Dial: cluster.DialOptions{AgentSocket: "-"}})
	a := newPhases(&attempt{r: r, n: 1, total: 1, cfg: &config.Config{Job: config.Job{HostWait: 5 * time.Minute},
		Hosts: []config.Host{typo}, InventoryPath: "job.toml"}}).connect
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // ends the test if it waits
	defer cancel()
	_, err := a.connect(ctx, []config.Host{typo})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "connect waited for the name to resolve: %v", err)
	assert.Contains(t, err.Error(), `gpu-a: address "gpu-typo.invalid" does not resolve`)
	assert.Contains(t, err.Error(), "job.toml")
	var de *net.DNSError
	assert.True(t, errors.As(err, &de), "%v", err)
}
