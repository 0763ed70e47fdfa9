package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

var fleet *fleettest.Fleet

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testAgentArg {
		os.Exit(runTestAgent(os.Args[2:])) // on a fleet host, as its agent
	}
	os.Exit(fleettest.Main(m, fleettest.Options{Name: "ck", N: 3, Subnet: 18}, &fleet))
}

// fleetHosts connects to every fleet host over SSH and gives each a fresh
// workdir: real SFTP, real sshd, a home per host.
func fleetHosts(t *testing.T) []Host {
	t.Helper()
	wd := fmt.Sprintf("ck/%s-%d", t.Name(), time.Now().UnixNano())
	var out []Host
	for _, h := range fleet.ClusterHosts() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tr, err := cluster.Dial(ctx, h.Endpoint(), cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { tr.Close() })
		fsys, err := tr.FS(context.Background())
		require.NoError(t, err)
		home, err := fsys.Home()
		require.NoError(t, err)
		out = append(out, Host{Name: h.Name, FS: fsys, Dir: path.Join(home, wd, "checkpoints"), Own: OwnDir(path.Join(home, wd))})
	}
	return out
}

// writeOn saves a checkpoint on fleet host i from inside it, as training
// code does (temp name, rename), with its modification time shifted by
// skew: that host's clock is off.
func writeOn(t *testing.T, i int, h Host, name string, mb int, skew time.Duration) {
	t.Helper()
	require.NoError(t, h.FS.MkdirAll(h.Dir, 0o755)) // as the login user
	tmp := path.Join(h.Dir, "."+name+".tmp")
	stamp := time.Now().Add(skew).UTC().Format("2006-01-02 15:04:05")
	script := fmt.Sprintf(`set -e; head -c %[1]d /dev/urandom > %[2]q; chown %[5]s %[2]q; touch -d %[3]q %[2]q; mv %[2]q %[4]q`,
		mb<<20, tmp, stamp+" UTC", path.Join(h.Dir, name), fleettest.User)
	out, err := fleet.Exec(i, "sh", "-c", script)
	require.NoError(t, err, "%s", out)
}

func sumOn(t *testing.T, i int, p string) string {
	t.Helper()
	out, err := fleet.Exec(i, "sha256sum", p)
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))[0]
}

// TestFleetCopyStageSkew runs the whole story over SSH: h0, whose clock is
// an hour ahead, writes a checkpoint; h1 writes a newer one. drover copies
// each to a second host and to the mirror while it "runs", and staging
// picks h1's (the one it saw complete last, though h0's file looks newer)
// and puts it on every host.
func TestFleetCopyStageSkew(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleetHosts(t)
	m, ev, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2, Mirror: t.TempDir(), PollEvery: 100 * time.Millisecond}
	stop := m.Watch(context.Background(), hosts, set)
	defer stop()

	writeOn(t, 0, hosts[0], "step-10.pt", 8, time.Hour)
	out, err := fleet.Exec(0, "ln", "-s", "step-10.pt", path.Join(hosts[0].Dir, "latest"))
	require.NoError(t, err, "%s", out)
	eventually(t, "step-10 copied", func() bool { return len(holders(m, 1)) == 3 })
	writeOn(t, 1, hosts[1], "step-20.pt", 8, 0)
	eventually(t, "step-20 copied", func() bool { return len(holders(m, 2)) == 3 })
	stop()
	t.Log(ev)
	old, err := Scan(context.Background(), hosts[0].FS, hosts[0].Name, hosts[0].Dir, "")
	require.NoError(t, err)
	newer, err := Scan(context.Background(), hosts[1].FS, hosts[1].Name, hosts[1].Dir, "")
	require.NoError(t, err)
	require.True(t, old[0].ModTime.After(newer[0].ModTime), "h0's clock is ahead: its older checkpoint has the later mtime")
	require.Len(t, m.Record().Entries(), 2, "a link to a checkpoint is not one")
	assert.ElementsMatch(t, []string{"written:" + hosts[0].Name, "copy:" + hosts[1].Name, "mirror:"}, holders(m, 1))
	assert.ElementsMatch(t, []string{"written:" + hosts[1].Name, "copy:" + hosts[2].Name, "mirror:"}, holders(m, 2))

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	want := sumOn(t, 1, path.Join(hosts[1].Dir, "step-20.pt"))
	for i, h := range hosts {
		assert.Equal(t, "step-20.pt", path.Base(paths[h.Name]), "%s resumes from the newest by drover's record", h.Name)
		assert.Equal(t, want, sumOn(t, i, paths[h.Name]), "%s's copy", h.Name)
	}
	assert.Equal(t, path.Join(hosts[1].Dir, "step-20.pt"), paths[hosts[1].Name])
	assert.Equal(t, path.Join(hosts[2].Own, seqDir(2), "step-20.pt"), paths[hosts[2].Name], "h2 held a copy: not sent again")
	assert.Equal(t, path.Join(hosts[0].Own, seqDir(2), "step-20.pt"), paths[hosts[0].Name])
	mirrored, err := os.ReadFile(filepath.Join(set.Mirror, seqDir(2), ManifestName))
	require.NoError(t, err)
	assert.Contains(t, string(mirrored), `"step-20.pt" 8388608 `+want)
	assert.Contains(t, ev.String(), "onto "+hosts[0].Name+" in", "only h0 lacked it")
}
