package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
)

// built holds the static agents these tests cross-build, once per test
// binary (scripts/build-agent, as `make build` does); TestMain removes them.
var built struct {
	mu    sync.Mutex
	dir   string
	paths map[string]string
}

// builtAgent returns the static linux/goarch agent, building it at first use.
func builtAgent(t *testing.T, goarch string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-builds an agent")
	}
	built.mu.Lock()
	defer built.mu.Unlock()
	if p, ok := built.paths[goarch]; ok {
		return p
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "drover-agents-")
		require.NoError(t, err)
		built.dir, built.paths = dir, map[string]string{}
	}
	p, err := fleettest.BuildAgent(built.dir, goarch)
	require.NoError(t, err)
	built.paths[goarch] = p
	return p
}

func removeBuiltAgents() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

func sum12(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])[:12]
}

// The linux/amd64 agent runs where nothing else is: an empty root, without
// libc, loader, /proc or /dev. It answers its version and a probe that
// finds no driver.
func TestStaticAgentInEmptyChroot(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("runs the linux/amd64 agent")
	}
	testenv.Root(t, "chroot")
	bin := builtAgent(t, "amd64")
	root := t.TempDir()
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "drover"), b, 0o755))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the root holds the agent and nothing else")

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("/drover", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{}
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "drover %v in an empty chroot: %s", args, stderr.String())
		return stdout.String()
	}
	want, err := agent.FileVersion(bin)
	require.NoError(t, err)
	assert.Equal(t, want+"\n", run("agent", "version"))
	assert.Regexp(t, `^drover \S+ linux/amd64$`, want)

	var rep gpu.HostReport
	out := run("agent", "probe", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Empty(t, rep.Devices)
	assert.NotNil(t, rep.Devices)
	assert.Equal(t, gpu.NoDriverReason, rep.Reason)
	assert.Contains(t, rep.Reason, "no NVIDIA driver")
}

// The linux/arm64 agent is a static aarch64 executable (no interpreter, no
// shared libraries) that carries an aarch64 NVML reader, and FindAgents
// finds both agents beside a drover binary.
func TestArm64AgentIsStaticAarch64(t *testing.T) {
	bin := builtAgent(t, "arm64")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, elf.EM_AARCH64, f.Machine)
	assert.Equal(t, elf.ELFCLASS64, f.Class)
	assert.Equal(t, elf.ELFDATA2LSB, f.Data)
	assert.Equal(t, elf.ET_EXEC, f.Type)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "a static executable has no interpreter")
		assert.NotEqual(t, elf.PT_DYNAMIC, p.Type, "a static executable has no dynamic section")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs)

	reader, err := agent.ReadCarriedReader(bin)
	require.NoError(t, err)
	require.NotEmpty(t, reader, "the agent carries the NVML reader")
	rf, err := elf.NewFile(bytes.NewReader(reader))
	require.NoError(t, err)
	assert.Equal(t, elf.EM_AARCH64, rf.Machine)
	assert.Contains(t, interp(t, rf), "ld-linux-aarch64.so.1", "the reader is dynamic: it loads libnvidia-ml.so.1")

	agents := FindAgents(filepath.Join(filepath.Dir(bin), "drover"))
	got, err := agents.For("h", "linux/arm64")
	require.NoError(t, err)
	assert.Equal(t, bin, got.Path)
	assert.True(t, got.Static)
}

func interp(t *testing.T, f *elf.File) string {
	t.Helper()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			_, err := p.ReadAt(b, 0)
			require.NoError(t, err)
			return string(bytes.TrimRight(b, "\x00"))
		}
	}
	return ""
}

// fakeUname makes host i answer `uname` as an aarch64 machine, for every
// login to it and to no other host, until the test ends.
func fakeUname(t *testing.T, i int) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "uname")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
s=Linux m=aarch64
case "$*" in
-m) echo "$m" ;;
-sm|"-s -m") echo "$s $m" ;;
*) echo "$s" ;;
esac
`), 0o755))
	real, err := exec.LookPath("uname")
	require.NoError(t, err)
	real, err = filepath.EvalSymlinks(real)
	require.NoError(t, err)
	_, err = fleet.ExecInLogins(i, "mount", "--bind", script, real)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.ExecInLogins(i, "umount", real); err != nil {
			t.Error(err)
		}
	})
}

// A host whose `uname -m` says aarch64 gets the linux/arm64 agent. This
// machine cannot run it, so the run after the upload fails, with the
// loader's words, before anything is started, and nothing is left in the
// agent directory; the host next to it (x86_64) gets this machine's agent.
// Without an arm64 agent the error names the command that builds one.
func TestFleetAarch64HostGetsArm64Agent(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("needs a host that cannot run arm64 binaries")
	}
	ts := dialFleet(t)
	arm := builtAgent(t, "arm64")
	fakeUname(t, 1)
	agents := selfAgents(t)
	armBin, ok := inspect(arm, "linux/arm64")
	require.True(t, ok)
	agents.Carried = map[Platform]Binary{"linux/arm64": armBin}

	out, err := output(context.Background(), ts[1], "uname", "-m")
	require.NoError(t, err)
	require.Equal(t, "aarch64\n", string(out), "the fake uname is in place")

	_, err = install(t, ts[1], agents)
	var cr *CannotRunError
	require.ErrorAs(t, err, &cr)
	t.Log(err)
	assert.Equal(t, arm, cr.Agent, "the arm64 agent was chosen")
	assert.Regexp(t, `/\.drover/bin/\.drover-`+sum12(t, arm)+`\.tmp-[0-9a-f]+$`, cr.Remote)
	assert.Contains(t, err.Error(), "Exec format error", "the host's own words")
	fsys, err := ts[1].FS(context.Background())
	require.NoError(t, err)
	home, err := fsys.Home()
	require.NoError(t, err)
	assertOnlyAgents(t, fsys, path.Join(home, agentDir))
	_, err = fsys.Stat(path.Join(home, agentDir, "drover-"+sum12(t, arm)))
	assert.ErrorIs(t, err, os.ErrNotExist, "an agent that cannot run is not installed")

	remote, err := install(t, ts[0], agents)
	require.NoError(t, err, "the x86_64 host gets this machine's agent")
	assert.Regexp(t, `/drover-`+sum12(t, agents.Self)+`$`, remote)

	_, err = install(t, ts[1], selfAgents(t))
	var na *NoAgentError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, Platform("linux/arm64"), na.Platform)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -o ")

	rep := Probe(context.Background(), ts[1], agents)
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Contains(t, rep.Reason, "Exec format error")
	assert.Contains(t, rep.Reason, "nvidia-smi: not found")
}

// The static agent reads NVML where a driver is: it runs the NVML reader
// it carries, from memory, and that loads libnvidia-ml.so.1 (here the fake
// one gpu/dlnvml's tests use, found through LD_LIBRARY_PATH).
func TestStaticAgentReadsNVMLThroughReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("runs a linux agent")
	}
	lib := fakeNVMLLib(t)
	bin := builtAgent(t, runtime.GOARCH)

	cmd := exec.Command(bin, "agent", "probe", "--json")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	var rep gpu.HostReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	host, _ := os.Hostname()
	assert.Equal(t, host, rep.Host)
	require.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
	assert.Equal(t, "550.54.15", rep.Driver)
	require.Len(t, rep.Devices, 2)
	assert.Equal(t, "00000000:19:00.0", rep.Devices[1].PCIBusID)
	assert.Len(t, rep.Devices[1].Processes, 2)
}

// fakeNVMLLib builds gpu/dlnvml's fake libnvidia-ml.so.1 into a directory
// for LD_LIBRARY_PATH.
func fakeNVMLLib(t *testing.T) string {
	t.Helper()
	cc := testenv.LookPath(t, "cc")
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	require.NoError(t, err)
	lib := t.TempDir()
	msg, err := exec.Command(cc, "-shared", "-fPIC", "-Wno-deprecated-declarations",
		"-I", filepath.Join(string(bytes.TrimSpace(mod)), "pkg", "nvml"),
		"-o", filepath.Join(lib, gpu.NVMLLibrary),
		filepath.Join("..", "..", "..", "gpu", "dlnvml", "testdata", "fakenvml.c")).CombinedOutput()
	require.NoError(t, err, "%s", msg)
	return lib
}

// The static agent's health read goes through the NVML reader too: the
// counters arrive, and --xid-wait reaches the reader, which listens for
// Xid events (the fake library queues an Xid 79 on GPU 1).
func TestStaticAgentReadsHealthThroughReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("runs a linux agent")
	}
	lib := fakeNVMLLib(t)
	bin := builtAgent(t, runtime.GOARCH)
	for _, sick := range []string{"ecc", "xid"} {
		args := agent.HealthCommand(bin, 200*time.Millisecond)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "FAKE_NVML_HEALTH="+sick)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		var rep gpu.HostReport
		require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
		require.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
		assert.Contains(t, rep.XIDSource, "nvml", sick)
		fs := gpu.CheckHealth(rep, gpu.HealthPolicy{IgnoreXIDs: config.DefaultIgnoreXIDs, Idle: true})
		require.Len(t, fs, 1, "%s: %v", sick, fs)
		assert.True(t, fs[0].Critical, sick)
		assert.Equal(t, "GPU 1", fs[0].GPU, sick)
	}
}

// A static drover with no agents beside it (a plain CGO_ENABLED=0 go
// build) is its own agent for hosts of its platform, and names the fix for
// the others.
func TestStaticDroverIsItsOwnAgent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a linux drover")
	}
	b, err := os.ReadFile(builtAgent(t, runtime.GOARCH))
	require.NoError(t, err)
	self := filepath.Join(t.TempDir(), "drover")
	require.NoError(t, os.WriteFile(self, b, 0o755))
	agents := FindAgents(self)
	assert.Empty(t, agents.Carried)
	got, err := agents.For("h", Platform("linux/"+runtime.GOARCH))
	require.NoError(t, err)
	assert.Equal(t, self, got.Path)
	assert.True(t, got.Static)
	other := Platform("linux/arm64")
	if runtime.GOARCH == "arm64" {
		other = "linux/amd64"
	}
	_, err = agents.For("h", other)
	var na *NoAgentError
	require.ErrorAs(t, err, &na)
	assert.Equal(t, []Platform{Platform("linux/" + runtime.GOARCH)}, na.Have)
}
