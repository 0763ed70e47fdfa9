package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

// bastionTargets is how many hosts sit behind the one jump host.
const bastionTargets = 64

// farAway listens on localhost and forwards every connection to addr with
// delay added to each direction, as to a bastion in another region: the
// handshake's round trips keep each connection unauthenticated for a
// while, which is what sshd's MaxStartups counts. It returns the
// listening address.
func farAway(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { delayedCopy(u, c, delay); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { delayedCopy(c, u, delay); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// delayedCopy copies src to dst, each chunk delivered delay after it was
// read, in order.
func delayedCopy(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			for range ch {
			}
			return
		}
	}
}

// farBastion returns f's hosts with host 0, the bastion, reached through
// farAway (delay each way) and every host's known_hosts saying so.
func farBastion(t *testing.T, f *fleettest.Fleet, delay time.Duration) []cluster.Endpoint {
	t.Helper()
	hosts := f.Endpoints()
	jumpAddr := farAway(t, net.JoinHostPort(hosts[0].Address, "22"), delay)
	host, port, _ := net.SplitHostPort(jumpAddr)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	kh, err := os.ReadFile(f.KnownHosts)
	require.NoError(t, err)
	jumpKey, err := os.ReadFile(f.HostKeyFile(0) + ".pub")
	require.NoError(t, err)
	fields := strings.Fields(string(jumpKey))
	kh = append(kh, fmt.Sprintf("[%s]:%s %s %s\n", host, port, fields[0], fields[1])...)
	require.NoError(t, os.WriteFile(knownHosts, kh, 0o600))
	for i := range hosts {
		hosts[i].KnownHosts = knownHosts
	}
	hosts[0].Address = host
	hosts[0].Port, _ = strconv.Atoi(port)
	return hosts
}

// TestSSHBastionRetriesDroppedHandshake: two commands at once through the
// same far bastion, each with its own connection to it, while its sshd
// lets one connection at a time authenticate (MaxStartups 1:100:2): sshd
// drops the second handshake, and drover dials the bastion again (with
// backoff) instead of failing the host.
func TestSSHBastionRetriesDroppedHandshake(t *testing.T) {
	fleettest.Need(t, fleet)
	require.NoError(t, fleet.SetSSHD(0, "MaxStartups 1:100:2\n"))
	t.Cleanup(func() { assert.NoError(t, fleet.SetSSHD(0, "")) })
	hosts := farBastion(t, fleet, 40*time.Millisecond)
	var wg sync.WaitGroup
	for _, i := range []int{1, 2} {
		h := hosts[i]
		h.ProxyJump = hosts[0].Name
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := hermetic()
			opts.Inventory = hosts
			opts = opts.Shared() // a connection to the bastion of its own
			tr, err := cluster.Dial(context.Background(), h, opts)
			if assert.NoError(t, err, h.Name) {
				assert.Equal(t, h.Name+"\n", output(t, tr, "hostname"))
				tr.Close()
			}
		}()
	}
	wg.Wait()
	logb, err := os.ReadFile(filepath.Join(filepath.Dir(fleet.HostKeyFile(0)), "sshd.log"))
	require.NoError(t, err)
	require.Contains(t, string(logb), "past MaxStartups", "the bastion dropped a handshake (else this test tests nothing)")
}

// TestSSHBastionAtScale: 64 hosts behind one ProxyJump host whose sshd
// keeps OpenSSH's default MaxStartups 10:30:100 (beyond 10 connections
// still authenticating, it drops 30% of new ones, rising to all at 100)
// all connect at the first try, and each then runs a command and takes a
// file over SFTP, as exec, push and run do.
func TestSSHBastionAtScale(t *testing.T) {
	fleettest.Need(t, fleet)
	bf, err := fleettest.Up(fleettest.Options{Name: "bj", N: bastionTargets + 1, Subnet: 11, First: 100})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, bf.Close()) })
	require.NoError(t, bf.SetSSHD(0, "MaxStartups 10:30:100\n"))

	// The jump host is reached through 40 ms each way, the targets from
	// it directly.
	hosts := farBastion(t, bf, 40*time.Millisecond)
	jump := hosts[0]
	targets := hosts[1:]
	for i := range targets {
		targets[i].ProxyJump = jump.Name
	}
	opts := hermetic()
	opts.Inventory = hosts
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	ts, errs := cluster.DialAll(ctx, targets, opts)
	t.Logf("dialled %d hosts through one jump host in %v", len(targets), time.Since(start))
	var wg sync.WaitGroup
	for i, h := range targets {
		if !assert.NoError(t, errs[i], h.Name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ts[i].Close()
			assert.Equal(t, h.Name+"\n", output(t, ts[i], "hostname"))
			fsys, err := ts[i].FS(ctx)
			if !assert.NoError(t, err, h.Name) {
				return
			}
			w, err := fsys.Create("pushed")
			if assert.NoError(t, err, h.Name) {
				_, err = fmt.Fprintf(w, "to %s\n", h.Name)
				assert.NoError(t, err)
				assert.NoError(t, w.Close())
			}
			assert.Equal(t, "to "+h.Name+"\n", output(t, ts[i], "cat", "pushed"))
		}()
	}
	wg.Wait()
	t.Logf("dialled, ran a command, wrote a file over SFTP and read it back on %d hosts in %v", len(targets), time.Since(start))
	// One connection to the bastion carried them all: nothing for
	// MaxStartups to drop (the two others are the fleet's readiness probes).
	logb, err := os.ReadFile(filepath.Join(bf.Dir, "hosts", bf.Hosts[0].Name, "sshd.log"))
	require.NoError(t, err)
	assert.NotContains(t, string(logb), "past MaxStartups")
	assert.LessOrEqual(t, strings.Count(string(logb), "Accepted publickey"), 1, "logins on the bastion")
}
