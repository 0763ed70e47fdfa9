package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --metrics-addr with a port alone serves localhost only: the docs'
// ":9400" used to bind every interface, handing the job's hosts, ranks
// and GPUs to anyone on the network. Exposing them takes an address.
func TestMetricsAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9400":         "127.0.0.1:9400",
		"9400":          "127.0.0.1:9400",
		":0":            "127.0.0.1:0",
		"0.0.0.0:9400":  "0.0.0.0:9400",
		"10.0.0.5:9400": "10.0.0.5:9400",
		"[::]:9400":     "[::]:9400",
		"localhost:94":  "localhost:94",
		"nonsense":      "nonsense",
	} {
		assert.Equal(t, want, metricsAddr(in), "%q", in)
	}
	ln, err := net.Listen("tcp", metricsAddr(":0"))
	require.NoError(t, err)
	defer ln.Close()
	assert.True(t, ln.Addr().(*net.TCPAddr).IP.IsLoopback(), "listens on %s", ln.Addr())
}
