package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestEveryCommandTakesFleetFlags: every command that reads a job file
// takes --inventory and --accept-new-hosts (README: "Every command takes
// ..."); `drover plan --accept-new-hosts` used to exit 2.
func TestEveryCommandTakesFleetFlags(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, cmd := range leafCommands(app.Commands) {
		if cmd.Name == "agent" || cmd.Name == slurmStepCommand || cmd.Name == "version" {
			continue // runs on a host, or reads no job file
		}
		names := map[string]bool{}
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				names[n] = true
			}
		}
		assert.True(t, names[flagInventory], "drover %s lacks --%s", cmd.Name, flagInventory)
		assert.True(t, names[flagAcceptNewHosts], "drover %s lacks --%s", cmd.Name, flagAcceptNewHosts)
	}
}

// leafCommands is every command that runs something: a command with
// subcommands (drover check) is only their parent, and each of them
// (check net) takes the flags. The agent's subcommands stay under it.
func leafCommands(cmds []*cli.Command) []*cli.Command {
	var leaves []*cli.Command
	for _, c := range cmds {
		if len(c.Subcommands) > 0 && c.Name != "agent" {
			leaves = append(leaves, leafCommands(c.Subcommands)...)
			continue
		}
		leaves = append(leaves, c)
	}
	return leaves
}

// TestPlanAcceptsFleetFlags runs the CLI with both flags, before and
// after the job file.
func TestPlanAcceptsFleetFlags(t *testing.T) {
	job := filepath.Join("..", "..", "examples", "tensorflow-ps", "job.toml")
	inv := filepath.Join(t.TempDir(), "fleet.toml")
	require.NoError(t, os.WriteFile(inv, []byte("[[host]]\nname = \"x\"\naddress = \"10.9.0.1\"\ngpus = [0, 1, 2, 3]\n"), 0o600))
	for _, args := range [][]string{
		{"--accept-new-hosts", job},
		{job, "--accept-new-hosts", "--inventory", inv},
		{"-i", inv, job},
	} {
		code, out, errOut := runPlan(t, args...)
		require.Equal(t, 0, code, "drover plan %v: %s", args, errOut)
		if slices.Contains(args, inv) {
			assert.Contains(t, out, "10.9.0.1", "drover plan %v did not take the hosts from %s", args, inv)
		}
	}
}
