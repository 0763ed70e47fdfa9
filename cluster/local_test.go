package cluster_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/transporttest"
)

func TestLocalConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) cluster.Transport {
		// HOME decides the local transport's home; a temporary one keeps
		// the suite's files out of the real home directory.
		t.Setenv("HOME", t.TempDir())
		tr, err := cluster.Dial(context.Background(), cluster.Host{Name: "local0", Address: "local", Transport: cluster.TransportLocal}, cluster.DialOptions{})
		require.NoError(t, err)
		return tr
	})
}

func TestDialUnknownTransport(t *testing.T) {
	_, err := cluster.Dial(context.Background(), cluster.Host{Name: "x", Transport: "telnet"}, cluster.DialOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown transport "telnet"`)
}
