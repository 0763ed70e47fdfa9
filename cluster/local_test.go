package cluster_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

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
		tr, err := cluster.Dial(context.Background(), cluster.Endpoint{Name: "local0", Address: "local", Transport: cluster.TransportLocal}, cluster.DialOptions{})
		require.NoError(t, err)
		return tr
	})
}

func TestDialUnknownTransport(t *testing.T) {
	_, err := cluster.Dial(context.Background(), cluster.Endpoint{Name: "x", Transport: "telnet"}, cluster.DialOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown transport "telnet"`)
}

// TestDialEachDoesNotWaitForSlowHosts: a host whose handshake hangs (a
// listener that never speaks SSH) delays only its own callback; the others
// run while it is still being dialled.
func TestDialEachDoesNotWaitForSlowHosts(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hosts := []cluster.Endpoint{
		{Name: "mute", Address: "127.0.0.1", Port: port},
		{Name: "a", Address: "local", Transport: cluster.TransportLocal},
		{Name: "b", Address: "local", Transport: cluster.TransportLocal},
		{Name: "bad", Transport: "telnet"},
	}
	var mu sync.Mutex
	var order []string
	calls := map[int]int{}
	cluster.DialEach(context.Background(), hosts, cluster.DialOptions{ConnectTimeout: 2 * time.Second}, func(i int, tr cluster.Transport, err error) {
		mu.Lock()
		order = append(order, hosts[i].Name)
		calls[i]++
		mu.Unlock()
		assert.True(t, (tr == nil) != (err == nil), "%s: exactly one of transport and error", hosts[i].Name)
		if tr != nil {
			assert.Equal(t, hosts[i].Name, tr.Host().Name)
			tr.Close()
		}
	})
	assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 1}, calls, "one callback per host")
	assert.Equal(t, "mute", order[len(order)-1], "the hanging host is handed over last: %v", order)
}
