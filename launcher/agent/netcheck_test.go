package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/droverhq/drover/launcher/peerauth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startListener runs NetListen on loopback with token and returns its
// address and a function that ends its stdin and waits for it.
func startListener(t *testing.T, token string, accept int) (string, func() error) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- NetListen(context.Background(), NetListenOptions{Iface: "lo", Accept: accept, Timeout: time.Minute}, inR, outW)
		outW.Close()
	}()
	_, err := io.WriteString(inW, token+"\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(outR).ReadString('\n')
	require.NoError(t, err)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), ListeningPrefix)
	require.True(t, ok, "listener said %q", line)
	go io.Copy(io.Discard, outR)
	return addr, func() error { inW.Close(); return <-done }
}

// A sender with the token measures the link; the receiver's count and
// time make the rate.
func TestNetSendMeasures(t *testing.T) {
	tok := newToken(t)
	addr, stop := startListener(t, tok, 0)
	res, err := NetSend(context.Background(), NetSendOptions{To: addr, Duration: 200 * time.Millisecond}, strings.NewReader(tok+"\n"))
	require.NoError(t, err)
	assert.Positive(t, res.Bytes)
	assert.Positive(t, res.Seconds)
	assert.Positive(t, res.BitsPerSec)
	assert.Positive(t, res.RTTMicros)
	assert.NoError(t, stop())
}

// A connection without the token is closed unmeasured: the port serves
// nothing but drover's own measurement.
func TestNetListenRefusesWrongToken(t *testing.T) {
	addr, stop := startListener(t, newToken(t), 0)
	_, err := NetSend(context.Background(), NetSendOptions{To: addr, Duration: 100 * time.Millisecond}, strings.NewReader(newToken(t)+"\n"))
	require.ErrorIs(t, err, peerauth.ErrAuth)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, _ = c.Write([]byte("guess\np" + strings.Repeat("x", peerauth.ProofSize)))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	assert.Len(t, got, peerauth.TokenSize, "the listener's nonce, then it hangs up: a ping without the token is not answered")
	c.Close()
	assert.NoError(t, stop())
}

// With --accept the listener exits on its own after that many
// measurements, stdin still open.
func TestNetListenAcceptEnds(t *testing.T) {
	inR, inW := io.Pipe()
	defer inW.Close()
	var out strings.Builder
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		done <- NetListen(context.Background(), NetListenOptions{Iface: "lo", Accept: 1, Timeout: time.Minute}, inR, pw)
		pw.Close()
	}()
	tok := newToken(t)
	_, _ = io.WriteString(inW, tok+"\n")
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	go io.Copy(&out, pr)
	addr := strings.TrimPrefix(strings.TrimSpace(line), ListeningPrefix)
	_, err = NetSend(context.Background(), NetSendOptions{To: addr, Duration: 50 * time.Millisecond}, strings.NewReader(tok+"\n"))
	require.NoError(t, err)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("net-listen --accept 1 did not exit after one measurement")
	}
}

func newToken(t *testing.T) string {
	t.Helper()
	tok, err := peerauth.NewToken()
	require.NoError(t, err)
	return tok
}

// Neither an interface nor an address: net-listen refuses rather than
// listen on every address.
func TestNetListenNeedsAddress(t *testing.T) {
	err := NetListen(context.Background(), NetListenOptions{Timeout: time.Second}, strings.NewReader(newToken(t)+"\n"), io.Discard)
	require.ErrorContains(t, err, "does not listen on every address")
	err = NetListen(context.Background(), NetListenOptions{Listen: "0.0.0.0", Timeout: time.Second}, strings.NewReader(newToken(t)+"\n"), io.Discard)
	require.ErrorContains(t, err, "every address")
}
