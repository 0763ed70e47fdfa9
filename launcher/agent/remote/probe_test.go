package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/launcher/agent"
)

var fleet *fleettest.Fleet

// TestMain brings up the fleet, and doubles as drover's agent: Probe
// installs this test binary on the host and runs `<it> agent version` and
// `<it> agent probe --json`, which land here and answer as cmd/drover's
// agent would, so these tests do not depend on the drover binary being
// buildable.
func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == "agent" {
		var err error
		switch {
		case os.Args[2] == "version":
			_, err = fmt.Println(agent.Version())
		case os.Args[2] == "probe" && len(os.Args) == 4 && os.Args[3] == "--json":
			err = agent.WriteProbe(os.Stdout, true)
		default:
			err = fmt.Errorf("test agent: unknown command %q", os.Args[1:])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := fleettest.Main(m, fleettest.Options{Name: "gp", N: 2, Subnet: 13}, &fleet)
	removeBuiltAgents()
	os.Exit(code)
}

func dialFleet(t *testing.T) []cluster.Transport {
	t.Helper()
	fleettest.Need(t, fleet)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, errs := cluster.DialAll(ctx, fleet.Endpoints(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	for i, err := range errs {
		require.NoError(t, err, "dial host %d", i)
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			tr.Close()
		}
	})
	return ts
}

// selfAgents is this test binary as the only agent.
func selfAgents(t *testing.T) Agents {
	t.Helper()
	bin, err := os.Executable()
	require.NoError(t, err)
	return FindAgents(bin)
}

// The fleet's hosts have no NVIDIA driver (this machine has none): the
// probe must say so through the agent, with zero devices, and not fail.
func TestProbeAllFleetNoDriver(t *testing.T) {
	ts := dialFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reps := ProbeAll(ctx, ts, selfAgents(t))
	require.Len(t, reps, len(ts))
	for i, rep := range reps {
		assert.Equal(t, fleet.Hosts[i].Name, rep.Host)
		assert.Equal(t, gpu.SourceNone, rep.Source)
		assert.Empty(t, rep.Devices)
		assert.NotNil(t, rep.Devices)
		// NVML's reason, from the agent, beats nvidia-smi's absence.
		assert.Equal(t, "nvml: libnvidia-ml.so.1 not found: no NVIDIA driver", rep.Reason)
		assert.Equal(t, fmt.Sprintf("%s: 0 GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)", fleet.Hosts[i].Name), rep.Summary())
	}
}

// When the agent cannot be installed and there is no nvidia-smi, the
// reason says both.
func TestProbeNeitherWorks(t *testing.T) {
	ts := dialFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := Probe(ctx, ts[0], Agents{Self: filepath.Join(t.TempDir(), "no-such-drover")})
	t.Log(rep.Summary())
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Empty(t, rep.Devices)
	assert.Contains(t, rep.Reason, "agent: ")
	assert.Contains(t, rep.Reason, "nvidia-smi: not found")
}

// fakeSMI runs the recorded nvidia-smi of testdata/smi/<set> on the host in
// place of nvidia-smi, so the fallback is exercised over real SSH.
type fakeSMI struct {
	cluster.Transport
	script string
}

func (f fakeSMI) Start(ctx context.Context, cmd cluster.Cmd) (cluster.Process, error) {
	if len(cmd.Args) > 0 && cmd.Args[0] == "nvidia-smi" {
		cmd.Args = append([]string{"sh", f.script}, cmd.Args[1:]...)
	}
	return f.Transport.Start(ctx, cmd)
}

// installFakeSMI copies testdata/smi/<set> to the host with a script that
// prints the file matching its arguments, as nvidia-smi would.
func installFakeSMI(t *testing.T, tr cluster.Transport, set string) fakeSMI {
	t.Helper()
	ctx := context.Background()
	fsys, err := tr.FS(ctx)
	require.NoError(t, err)
	home, err := fsys.Home()
	require.NoError(t, err)
	dir := path.Join(home, "fake-smi-"+set)
	require.NoError(t, fsys.MkdirAll(dir, 0o755))
	put := func(name string, data []byte) {
		w, err := fsys.Create(path.Join(dir, name))
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	for _, f := range []string{"query-gpu.csv", "compute-apps.csv", "mig.csv", "nvidia-smi.txt"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "gpu", "testdata", "smi", set, f))
		require.NoError(t, err)
		put(f, b)
	}
	put("nvidia-smi", []byte(`d=$(dirname "$0")
case "$1" in
--query-gpu=index,uuid,*) cat "$d/query-gpu.csv" ;;
--query-compute-apps=*) cat "$d/compute-apps.csv" ;;
--query-gpu=index,mig.mode.current) cat "$d/mig.csv" ;;
"") cat "$d/nvidia-smi.txt" ;;
*) echo "Invalid combination of input arguments." >&2; exit 2 ;;
esac
`))
	t.Cleanup(func() { fsys.RemoveAll(dir) })
	return fakeSMI{Transport: tr, script: path.Join(dir, "nvidia-smi")}
}

func TestProbeSMIFallback(t *testing.T) {
	ts := dialFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := installFakeSMI(t, ts[1], "a100x8")
	want := loadSMI(t, "a100x8")
	want.Host = fleet.Hosts[1].Name

	t.Run("no agent", func(t *testing.T) {
		rep := Probe(ctx, tr, Agents{})
		assert.Equal(t, want, rep)
	})
	t.Run("agent finds no NVML", func(t *testing.T) {
		rep := Probe(ctx, tr, selfAgents(t))
		assert.Equal(t, gpu.SourceSMI, rep.Source)
		assert.Equal(t, want.Devices, rep.Devices)
		assert.Equal(t, "agent: nvml: libnvidia-ml.so.1 not found: no NVIDIA driver", rep.Reason)
	})
	t.Run("agent cannot be installed", func(t *testing.T) {
		rep := Probe(ctx, tr, Agents{Self: filepath.Join(t.TempDir(), "missing")})
		assert.Equal(t, gpu.SourceSMI, rep.Source)
		assert.Len(t, rep.Devices, 8)
		assert.Contains(t, rep.Reason, "agent: install drover agent on "+fleet.Hosts[1].Name)
	})
}

// A hung nvidia-smi (a wedged GPU does that) must not hang the probe past
// the caller's deadline.
func TestProbeHonoursContext(t *testing.T) {
	ts := dialFleet(t)
	tr := installFakeSMI(t, ts[0], "h100x1")
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	w, err := fsys.Create(tr.script)
	require.NoError(t, err)
	_, err = io.WriteString(w, "sleep 600\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan gpu.HostReport, 1)
	go func() { done <- Probe(ctx, tr, Agents{}) }()
	select {
	case rep := <-done:
		assert.Equal(t, gpu.SourceNone, rep.Source)
		assert.Contains(t, rep.Reason, "nvidia-smi: ")
	case <-time.After(30 * time.Second):
		t.Fatal("Probe did not return within 30s of its context expiring")
	}
}

// loadSMI is gpu's report of the recorded nvidia-smi outputs in set.
func loadSMI(t *testing.T, set string) gpu.HostReport {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "gpu", "testdata", "smi", set, f))
		require.NoError(t, err)
		return b
	}
	rep, err := gpu.ReportFromSMI(set, gpu.SMIOutputs{
		GPUs: read("query-gpu.csv"), Apps: read("compute-apps.csv"),
		MIG: read("mig.csv"), Banner: read("nvidia-smi.txt"),
	})
	require.NoError(t, err)
	return rep
}
