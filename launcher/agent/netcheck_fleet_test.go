//go:build linux

package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/peerauth"
)

// `check net`'s listener on a fleet host, as drover starts it with no
// interface named (--listen: the address drover reaches the host at), met
// by strangers on the network before drover's own sender. Before the fix
// it listened on every address, read a stranger's bytes up to a newline
// without bound (three connections took an agent to 2.2 GiB) and held any
// number of unproven connections.
func TestFleetNetListenStrangers(t *testing.T) {
	fleettest.Need(t, fleet)
	tr := dial(t, 0)
	remote := install(t, tr)
	host := fleet.ClusterHosts()[0].Address
	token, err := peerauth.NewToken()
	require.NoError(t, err)
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	var out capture
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: NetListenCommand(remote, NetListenOptions{Listen: host, Timeout: time.Minute}),
		Stdin: inR, Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	t.Cleanup(func() { inW.Close(); _ = p.Wait() })
	_, err = io.WriteString(inW, token+"\n")
	require.NoError(t, err)
	line := out.waitFor(t, "\n", 30*time.Second)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), ListeningPrefix)
	require.True(t, ok, "net-listen said %q", line)
	ip, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	assert.Equal(t, host, ip, "it listens on the host's address, not on every one")
	addr = net.JoinHostPort(host, port)

	t.Run("other address refused", func(t *testing.T) {
		// The host's loopback is another of its addresses.
		_, err := fleet.Exec(0, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port)
		assert.Error(t, err, "the listener answers on 127.0.0.1 too: it listens on every address")
	})

	t.Run("endless bytes", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		junk := make([]byte, 1<<20)
		var sent int64
		for sent < 256<<20 {
			n, err := c.Write(junk)
			sent += int64(n)
			if err != nil {
				break
			}
		}
		// What the kernels' buffers hold, no more: the listener read a
		// proof's worth and hung up.
		assert.Less(t, sent, int64(64<<20), "the listener kept reading a stranger's %d bytes", sent)
	})

	t.Run("idle flood", func(t *testing.T) {
		const n = 3 * maxUnproven
		conns := make([]net.Conn, 0, n)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range n {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			conns = append(conns, c)
		}
		// Those past the cap are closed at once, long before the proof's
		// deadline; the others still wait for a proof.
		closed := 0
		testenv.Wait(t, netProofTimeout/2, "connections past the cap closed", func() (bool, string) {
			closed = 0
			for _, c := range conns {
				if hungUp(c) {
					closed++
				}
			}
			return closed >= n-maxUnproven, ""
		})
		t.Logf("%d of %d idle connections closed at once", closed, n)
	})

	t.Run("drover's sender measures", func(t *testing.T) {
		tr1 := dial(t, 1)
		remote1 := install(t, tr1)
		var res, errOut capture
		err := runCmd(tr1, cluster.Cmd{Args: NetSendCommand(remote1, NetSendOptions{To: addr, Duration: 200 * time.Millisecond}),
			Stdin: strings.NewReader(token + "\n"), Stdout: &res, Stderr: &errOut})
		require.NoError(t, err, "net-send: %s", errOut.String())
		assert.Contains(t, res.String(), `"bits_per_second"`)
		wrong, _ := peerauth.NewToken()
		err = runCmd(tr1, cluster.Cmd{Args: NetSendCommand(remote1, NetSendOptions{To: addr, Duration: 100 * time.Millisecond}),
			Stdin: strings.NewReader(wrong + "\n"), Stdout: io.Discard, Stderr: &errOut})
		assert.Error(t, err, "a sender without the token is refused")
	})
}

// hungUp says whether the other end closed c: a short read returns EOF
// or a reset rather than timing out.
func hungUp(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	buf := make([]byte, 64)
	for {
		_, err := c.Read(buf) // the listener's nonce first, then EOF
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// runCmd runs cmd on tr to its end.
func runCmd(tr cluster.Transport, cmd cluster.Cmd) error {
	p, err := tr.Start(context.Background(), cmd)
	if err != nil {
		return err
	}
	return p.Wait()
}
