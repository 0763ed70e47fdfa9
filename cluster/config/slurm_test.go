package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const slurmJobTable = `[job]
name = "j"
framework = "pytorch"
command = ["python3", "t.py"]
code = "."
`

func writeJob(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.toml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestLoadSlurmTable(t *testing.T) {
	p := writeJob(t, tl(
		`inventory = "slurm"`,
		slurmJobTable,
		`[slurm]`,
		`partition = "gpu"`,
		`time = "1-00:00:00"`,
		`nodes = 4`,
		`gpus_per_node = 8`,
		`cpus_per_task = 16`,
		`account = "ml"`,
		`qos = "high"`,
		`constraint = "a100&ib"`,
		`requeue = true`,
		`extra_args = ["--exclusive", "--mem=0"]`,
	))
	alloc := []Host{{Name: "n1", Address: "n1", Transport: TransportSlurm}}
	cfg, err := Load(p, LoadOptions{Allocation: alloc})
	assert.Empty(t, alloc[0].Workdir, "Load does not write into the caller's hosts")
	require.NoError(t, err)
	assert.Equal(t, Slurm{Partition: "gpu", Time: "1-00:00:00", Nodes: 4, GPUsPerNode: 8, CPUsPerTask: 16,
		Account: "ml", QOS: "high", Constraint: "a100&ib", Requeue: true, ExtraArgs: []string{"--exclusive", "--mem=0"}}, cfg.Slurm)
	assert.True(t, cfg.FromAllocation)
	assert.Equal(t, withWorkdir(alloc, "drover/j"), cfg.Hosts)

	// Submitting needs no allocation yet.
	cfg, err = Load(p, LoadOptions{Submit: true})
	require.NoError(t, err)
	assert.Empty(t, cfg.Hosts)
	assert.Equal(t, 4, cfg.Slurm.Nodes)
}

// TestLoadSlurmSameJobFile: a job file written for a hand-run fleet runs
// on the allocation with --inventory slurm, and a job without hosts does
// inside an allocation.
func TestLoadSlurmSameJobFile(t *testing.T) {
	alloc := []Host{{Name: "n1", Address: "n1", Transport: TransportSlurm}}
	fleet := writeJob(t, slurmJobTable+"[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n")
	cfg, err := Load(fleet, LoadOptions{InventoryPath: InventorySlurm, Allocation: alloc})
	require.NoError(t, err)
	assert.Equal(t, withWorkdir(alloc, "drover/j"), cfg.Hosts)
	cfg, err = Load(fleet, LoadOptions{Allocation: alloc})
	require.NoError(t, err)
	assert.Equal(t, "a", cfg.Hosts[0].Name, "a job's own hosts win over the allocation's unless asked")

	noHosts := writeJob(t, slurmJobTable)
	cfg, err = Load(noHosts, LoadOptions{Allocation: alloc})
	require.NoError(t, err)
	assert.Equal(t, withWorkdir(alloc, "drover/j"), cfg.Hosts)
	_, err = Load(noHosts, LoadOptions{})
	assert.Contains(t, configErrors(t, err).Error(), "no hosts")
}

func TestLoadSlurmErrors(t *testing.T) {
	p := writeJob(t, tl(
		slurmJobTable+`[slurm]`, // lines 1-6
		`partition = "gpu a"`,
		`time = "soon"`,
		`nodes = 0`,
		`gpus_per_node = "8"`,
		`extra_args = ["exclusive", "--x=$(id)"]`,
		`partiton = "x"`,
		`[ssh]`,
		`user = "u"`,
	))
	_, err := Load(p, LoadOptions{InventoryPath: InventorySlurm})
	got := map[string]int{}
	for _, e := range configErrors(t, err) {
		got[e.Key] = e.Line
		t.Log(e.Error())
	}
	assert.Equal(t, map[string]int{
		"slurm.partition":     7,
		"slurm.time":          8,
		"slurm.nodes":         9,
		"slurm.gpus_per_node": 10,
		"slurm.extra_args":    11,
		"slurm.partiton":      12,
		"":                    0, // --inventory slurm outside an allocation
	}, got)
}

// withWorkdir is hosts as Load returns them: the job's workdir filled in.
func withWorkdir(hosts []Host, wd string) []Host {
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		h.Workdir = wd
		out[i] = h
	}
	return out
}
