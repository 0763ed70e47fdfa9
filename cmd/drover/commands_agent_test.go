package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

// The agents `make build` carries (the droveragent tag) answer every
// `drover agent` command a run sends and have no other command: what a
// host runs, and a quarter less to upload.
func TestAgentBuildHasOnlyAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover")
	}
	bin := filepath.Join(t.TempDir(), "agent")
	build := exec.Command("go", "build", "-tags", "droveragent", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.Command(bin, "agent", "version").Output()
	require.NoError(t, err)
	assert.Regexp(t, `^drover \S+ \S+/\S+\n$`, string(out))
	version := string(out)
	out, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), version), "--version of an agent build is its own: %s", out)
	out, err = exec.Command(bin, "agent", "--help").CombinedOutput()
	require.NoError(t, err)
	for _, sub := range []string{"run", "stop", "preflight", "probe", "version", "sftp"} {
		assert.Regexp(t, `(?m)^\s+`+sub+`\b`, string(out), "agent %s", sub)
	}

	out, err = exec.Command(bin, "run", "job.toml").CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "drover run in the agent build: %v: %s", err, out)
	assert.Equal(t, agent.ExitUsage, ee.ExitCode())
	assert.True(t, strings.Contains(string(out), `unknown command "run"`), "%s", out)
}

// The agent build links none of the libraries only the controller's
// commands use: every byte of it is uploaded to every fresh host (drover
// top's terminal UI and Prometheus client once made it 44% larger).
func TestAgentBuildLeavesOutControllerLibraries(t *testing.T) {
	cmd := exec.Command("go", "list", "-tags", "droveragent,urfave_cli_no_docs", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, pkg := range []string{"github.com/gdamore/tcell", "github.com/prometheus/", "launcher/topview", "go-md2man"} {
		if strings.Contains(string(out), pkg) {
			t.Errorf("the agent build links %s", pkg)
		}
	}
	// Nor the controller itself: the launcher, the planner, push, Slurm
	// (their package-level state stays in a binary even when no function
	// of theirs is called; about 0.65 MB).
	deps := strings.Fields(string(out))
	for _, pkg := range []string{"launcher", "launcher/plan", "launcher/lease", "cluster/push", "cluster/slurm"} {
		assert.NotContains(t, deps, "github.com/droverhq/drover/"+pkg, "the agent build links it")
	}
}
