package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

var (
	armOnce sync.Once
	armErr  error
)

// armAgentBesideDrover puts the linux/arm64 agent beside the test's drover
// binary, where `make build` puts it and where drover looks.
func armAgentBesideDrover(t *testing.T) {
	t.Helper()
	bin := kit.DroverBinary(t)
	armOnce.Do(func() { _, armErr = fleettest.BuildAgent(filepath.Dir(bin), "arm64") })
	require.NoError(t, armErr)
}

// A host whose `uname -m` says aarch64 gets the arm64 agent, which this
// machine cannot execute: drover run reports that host, with the words of
// its shell, and starts nothing anywhere.
func TestRunHostCannotRunItsAgent(t *testing.T) {
	fleettest.Need(t, fleet)
	if testing.Short() {
		t.Skip("cross-builds an agent")
	}
	armAgentBesideDrover(t)
	script := filepath.Join(t.TempDir(), "uname")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\ncase \"$*\" in -m) echo aarch64 ;; -sm|\"-s -m\") echo Linux aarch64 ;; *) echo Linux ;; esac\n"), 0o755))
	real, err := exec.LookPath("uname")
	require.NoError(t, err)
	real, err = filepath.EvalSymlinks(real)
	require.NoError(t, err)
	_, err = fleet.ExecInLogins(1, "mount", "--bind", script, real)
	require.NoError(t, err)
	defer func() {
		_, err := fleet.ExecInLogins(1, "umount", real)
		assert.NoError(t, err)
	}()

	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Script: "echo should not run\n", Job: "max_restarts = 3"})
	d := kit.StartDrover(t, j)
	assert.Equal(t, 1, d.Wait(t, 2*time.Minute))
	stderr := d.Stderr.String()
	t.Logf("drover stderr:\n%s", stderr)
	h1 := fleet.Hosts[1]
	assert.Contains(t, stderr, "install drover agent on "+h1.Name+" ("+h1.Addr+"): the drover agent for linux/arm64 ("+
		filepath.Join(filepath.Dir(kit.DroverBinary(t)), "drover-agent-linux-arm64")+") does not run on "+h1.Name)
	assert.Contains(t, stderr, "Exec format error")
	assert.NotContains(t, stderr, "started", "nothing was started")
	assert.NotContains(t, d.Stdout.String(), "should not run")
	assert.NotContains(t, stderr, "attempt 2/", "a setup failure is not retried")
}
