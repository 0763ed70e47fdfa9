package checkpoint

import (
	"context"
	"errors"
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

// hostileSFTP makes fleet host i's sftp Subsystem the hostile proxy with
// rules, until the test ends. Connections opened after it see the rules.
func hostileSFTP(t *testing.T, i int, rules []fleettest.SFTPRule) {
	t.Helper()
	require.NoError(t, fleet.HostileSFTP(i, rules))
	t.Cleanup(func() { assert.NoError(t, fleet.HostileSFTP(i, nil)) })
}

// TestHostileCheckpointNamesStayContained is the attack of issue 30: h0
// lists "x/.." (which pkg/sftp reduces to "..") in its checkpoint and in
// every directory above it, so that a copy that follows the names climbs
// from <seq>.tmp up to h1's home and the directory above the controller's
// mirror, where h0's planted .bashrc would land. The copy must refuse the
// name, naming h0 and it, and write nothing outside drover's directories.
func TestHostileCheckpointNamesStayContained(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleetHosts(t)[:2]
	wd := path.Dir(hosts[0].Dir) // ~/ck/<test>: the workdir
	// h0's checkpoint_dir is deep below its workdir, so that climbing from
	// it reaches as high on h1 as h1's copy area is deep.
	hosts[0].Dir = path.Join(wd, "a", "b", "c", "d", "ck")
	require.NoError(t, hosts[0].FS.MkdirAll(path.Join(hosts[0].Dir, "step-1"), 0o755)) // as the login user
	out, err := fleet.Exec(0, "sh", "-c", fmt.Sprintf(`set -e; echo weights > %[1]q/step-1/w.pt; echo PWNED > %[2]q/.bashrc; chown -R %[3]s %[2]q`,
		hosts[0].Dir, wd, fleettest.User))
	require.NoError(t, err, "%s", out)
	up := []fleettest.SFTPName{{Name: "x/..", Dir: true}}
	rules := []fleettest.SFTPRule{{Dir: path.Join(hosts[0].Dir, "step-1"), Names: up}, {Dir: hosts[0].Dir, Skip: 1, Names: up}}
	for d := path.Dir(hosts[0].Dir); d != wd; d = path.Dir(d) {
		rules = append(rules, fleettest.SFTPRule{Dir: d, Names: up})
	}
	hostileSFTP(t, 0, rules)
	// Reconnect (new SFTP sessions go through the proxy), same workdir.
	dir0 := hosts[0].Dir
	hosts = fleetHosts(t)[:2]
	for i := range hosts {
		hosts[i].Dir, hosts[i].Own = path.Join(wd, "checkpoints"), OwnDir(wd)
	}
	hosts[0].Dir = dir0

	home1, err := hosts[1].FS.Home()
	require.NoError(t, err)
	out, err = fleet.Exec(1, "sh", "-c", fmt.Sprintf("echo h1-own > %[1]q/.bashrc; chown %[2]s %[1]q/.bashrc", home1, fleettest.User))
	require.NoError(t, err, "%s", out)
	victim1 := sumOn(t, 1, path.Join(home1, ".bashrc"))
	before1 := filesOn(t, 1, home1, wd)
	ctl := t.TempDir() // the controller: the job file's directory, the mirror below it
	require.NoError(t, os.WriteFile(filepath.Join(ctl, ".bashrc"), []byte("controller's own\n"), 0o644))
	set := Settings{Copies: 2, Keep: 2, Mirror: filepath.Join(ctl, "p", "q", "r", "mirror")}
	before := tree(t, ctl)

	m, ev, _ := newManager(t)
	require.NoError(t, m.reconcile(context.Background(), hosts, set))
	require.Len(t, m.Record().Entries(), 1, "%s", ev)
	err = m.replicate(context.Background(), m.Record().Entries()[0].Seq, hosts, set)

	var bad *cluster.BadNameError
	if assert.True(t, errors.As(err, &bad), "the copy refuses the name: %v", err) {
		assert.True(t, strings.HasPrefix(bad.Host, hosts[0].Name+":"), "the error names h0: %v", err)
		assert.Equal(t, "..", bad.Name)
		assert.Contains(t, err.Error(), `listed ".."`)
	}
	assert.Equal(t, victim1, sumOn(t, 1, path.Join(home1, ".bashrc")), "h1's .bashrc is untouched")
	got, err := os.ReadFile(filepath.Join(ctl, ".bashrc"))
	require.NoError(t, err)
	assert.Equal(t, "controller's own\n", string(got), "the controller's .bashrc is untouched")
	mirror := filepath.Join("p", "q", "r", "mirror")
	assert.Equal(t, linesOutside(before, mirror), linesOutside(tree(t, ctl), mirror), "nothing written outside the mirror on the controller")
	assert.Equal(t, before1, filesOn(t, 1, home1, wd), "nothing written on h1 outside drover's directory")
}

// linesOutside drops the lines of a tree listing for keep, what is below
// it and the directories above it (whose mtimes change when it is made).
func linesOutside(listing, keep string) []string {
	var out []string
	for _, l := range strings.Split(listing, "\n") {
		name, _, _ := strings.Cut(l, " ")
		if name == "." || name == keep || strings.HasPrefix(name, keep+"/") || strings.HasPrefix(keep, name+"/") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// filesOn lists every path under home on fleet host i with its size and
// mtime, except wd's .drover and the directories above it.
func filesOn(t *testing.T, i int, home, wd string) []string {
	t.Helper()
	out, err := fleet.Exec(i, "find", home, "-mindepth", "1", "-printf", "%P %s %T@\\n")
	require.NoError(t, err, "%s", out)
	keep, _ := filepath.Rel(home, path.Join(wd, ".drover"))
	return linesOutside(string(out), keep)
}

// TestHostileScanNames has h0 list, beside a real checkpoint, names that
// are not entries ("x/.." and "" as pkg/sftp hands them on, one holding
// NUL) and one that is a valid name made to forge lines and clear the
// screen. Scan keeps the real one and the valid one, refuses the others
// with errors naming h0 and each name quoted, and what drover shows of the
// valid one is escaped.
func TestHostileScanNames(t *testing.T) {
	fleettest.Need(t, fleet)
	h := fleetHosts(t)[0]
	writeOn(t, 0, h, "step-1.pt", 1, 0)
	forged := "\x1b[2J\n12:00:00.000 forged event"
	hostileSFTP(t, 0, []fleettest.SFTPRule{{Dir: h.Dir, Names: []fleettest.SFTPName{{Name: "x/..", Dir: true}, {Name: ""}, {Name: "a\x00b"}, {Name: forged}}}})
	dir := h.Dir
	h = fleetHosts(t)[0]
	h.Dir = dir

	found, err := Scan(context.Background(), h.FS, h.Name, h.Dir, "")
	var names []string
	for _, f := range found {
		names = append(names, f.Name)
	}
	assert.ElementsMatch(t, []string{"step-1.pt", forged}, names)
	require.Error(t, err)
	for _, want := range []string{`listed ".."`, `listed "."`, `listed "a\x00b"`} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Contains(t, err.Error(), h.Name+" listed")
	assert.NotContains(t, err.Error(), "\x00")

	var b strings.Builder
	require.NoError(t, Render(&b, []Entry{{Seq: 1, Name: forged}}, time.UTC))
	assert.NotContains(t, b.String(), "\x1b")
	assert.Contains(t, b.String(), `\x1b[2J\n12:00:00.000 forged event`)
}
