package lighthost_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest/lighthost"
	"github.com/droverhq/drover/internal/testenv"
)

func fleet(t *testing.T, n int) *lighthost.Fleet {
	t.Helper()
	f, err := lighthost.NewFleet(t.TempDir(), "lh", n, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func host(f *lighthost.Fleet, i int) config.Host {
	h := f.Hosts()[i]
	return config.Host{Name: h.Name, Address: h.Addr.IP.String(), Port: h.Addr.Port, Transport: config.TransportSSH,
		User: lighthost.User, IdentityFile: f.KeyFile, KnownHosts: f.KnownHosts}
}

func dial(t *testing.T, h config.Host) cluster.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	require.NoError(t, err)
	return tr
}

// TestConformance: drover's SSH transport to a light host passes the suite
// every transport passes, so the light hosts behave as OpenSSH's do
// wherever drover can tell.
func TestConformance(t *testing.T) {
	f := fleet(t, 1)
	transporttest.Run(t, func(t *testing.T) cluster.Transport { return dial(t, host(f, 0)) })
}

// TestHostsAreApart: each host has its own address, host key and home;
// a client checking host keys strictly refuses one host's key for another's
// address.
func TestHostsAreApart(t *testing.T) {
	f := fleet(t, 3)
	homes := map[string]bool{}
	for i := range 3 {
		tr := dial(t, host(f, i))
		fsys, err := tr.FS(context.Background())
		require.NoError(t, err)
		home, err := fsys.Home()
		require.NoError(t, err)
		homes[home] = true
		tr.Close()
	}
	assert.Len(t, homes, 3, "one home per host")

	wrong := host(f, 0)
	wrong.Port = f.Hosts()[1].Addr.Port // host 1 answers, with its own key
	wrong.KnownHosts = t.TempDir() + "/kh"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := cluster.Dial(ctx, wrong.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	var hke *cluster.HostKeyError
	assert.ErrorAs(t, err, &hke, "unknown host key refused")
	c := f.Counts()
	assert.EqualValues(t, 3, c.SFTPs, "one sftp session per host")
}

// TestCloseKillsRunningCommands: a command (and what it started in the
// background) still running when the server closes does not outlive it.
func TestCloseKillsRunningCommands(t *testing.T) {
	f, err := lighthost.NewFleet(t.TempDir(), "lh", 1, "")
	require.NoError(t, err)
	tr := dial(t, host(f, 0))
	defer tr.Close()
	var out transporttest.SyncBuffer
	p, err := tr.Start(context.Background(), cluster.Cmd{Shell: "sleep 300 & echo $!; sleep 301", Stdout: &out})
	require.NoError(t, err)
	testenv.Wait(t, 10*time.Second, "the child's pid", func() (bool, string) {
		return strings.HasSuffix(out.String(), "\n"), fmt.Sprintf("%q", out.String())
	})
	child, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("background child %d to end with Close", child), func() bool {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		return err != nil || strings.Contains(string(data), ") Z ")
	})
	_ = p.Wait()
}
