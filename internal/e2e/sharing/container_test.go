package sharing

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/plan"
)

// containerHosts and containerProcs size the container scenario: 3 hosts
// x 2 ranks, as issue 38 asks.
const (
	containerHosts = 3
	containerProcs = 2
)

// Issue 38, item 2: every rank runs inside the job's image under rootless
// podman, loaded from an archive on each host, with drover's
// RANK/WORLD_SIZE/MASTER_ADDR on the hosts' network; a container killed
// from outside restarts the group; a container left behind in the
// workdir is removed before the first attempt, and a SIGKILLed agent
// leaves none; Ctrl-C and `drover stop` stop every rank through its
// container (podman stop: the rank sees SIGTERM) and leaves no container.
func TestRunInContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	fleettest.Need(t, fleet)
	testenv.LookPath(t, "podman")
	img := buildTestImage(t)
	uid := strings.TrimSpace(string(must(exec.Command("id", "-u", fleettest.User).Output())))
	for i := range containerHosts {
		preparePodmanHost(t, i, uid, img)
	}
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: containerHosts, Script: `
trap 'echo "rank $RANK got TERM"; exit 143' TERM
echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR restart=$DROVER_RESTART_COUNT image=$(cat /etc/drover-image)"
sleep 1000 &
wait
`, Job: fmt.Sprintf(`procs_per_host = %d
max_restarts = 3
container = { image = "docker-archive:%s/drover-img.tar", runtime = "podman" }`, containerProcs, kit.HostHome)})
	wd := kit.HostHome + "/" + j.Workdir
	world := containerHosts * containerProcs
	// A container an earlier agent left in the workdir (one killed
	// outright cannot remove its own): removed before the first attempt.
	for _, args := range [][]string{{"load", "-i", kit.HostHome + "/drover-img.tar"},
		{"run", "-d", "--name", "drover-left-behind", "--label", plan.LabelWorkdir + "=" + wd, "--network", "host", "localhost/drover-test-busybox:1", "sleep", "1000"}} {
		out, err := podmanOn(0, args...)
		require.NoError(t, err, "%s", out)
	}
	require.Equal(t, []string{"drover-left-behind"}, containersOn(t, 0, wd))
	d := kit.StartDrover(t, j)
	ready := func(restart int) [][]string {
		re := regexp.MustCompile(`(?m)^\[worker-(\d)@\S+\] rank=(\d) world=(\d+) master=(\S+) restart=` + strconv.Itoa(restart) + ` image=inside the drover test image$`)
		return d.WaitLines(t, re, world, 120*time.Second)
	}
	start := time.Now()
	lines := ready(0)
	assert.Equal(t, 1, strings.Count(d.Stderr.String(), " container(s) an earlier agent left in "), "stderr:\n%s", d.Stderr.String())
	assert.Contains(t, d.Stderr.String(), fleet.Hosts[0].Name+": removed 1 container(s) an earlier agent left in "+wd)
	t.Logf("%d ranks in containers on %d hosts after %s", world, containerHosts, time.Since(start).Round(time.Millisecond))
	ranks := map[string]bool{}
	for _, m := range lines {
		ranks[m[2]] = true
		assert.Equal(t, m[1], m[2], "worker-N is rank N")
		assert.Equal(t, strconv.Itoa(world), m[3])
		assert.Equal(t, lines[0][4], m[4], "one MASTER_ADDR")
	}
	assert.Len(t, ranks, world, "every rank ran inside the image")
	names := containersOn(t, 1, wd)
	require.Len(t, names, containerProcs, "one container a rank on %s", fleet.Hosts[1].Name)

	// A container killed from outside: its rank exits 137, the group
	// restarts, and the first attempt's containers are gone.
	victim := names[0]
	_, err := podmanOn(1, "kill", victim)
	require.NoError(t, err)
	ready(1)
	assert.Contains(t, d.Stderr.String(), "attempt 2/4: restarting the whole group")
	for i := range containerHosts {
		for _, n := range containersOn(t, i, wd) {
			assert.Contains(t, n, "-a2-", "only the second attempt's containers on %s", fleet.Hosts[i].Name)
		}
	}

	// A SIGKILLed agent: its group stopped through its pidfile, and no
	// container of its attempt is left when the next one starts (were
	// one left, the next attempt would remove it, as above).
	agents := 0
	for _, p := range kit.JobProcs(t, j.Name, 2) {
		if strings.Contains(p.Cmdline, " agent run ") && strings.Contains(p.Cmdline, "--container ") && agents == 0 {
			agents++
			require.NoError(t, syscall.Kill(p.Pid, syscall.SIGKILL))
		}
	}
	require.Equal(t, 1, agents, "an agent of a container on %s", fleet.Hosts[2].Name)
	ready(2)
	for i := range containerHosts {
		for _, n := range containersOn(t, i, wd) {
			assert.Contains(t, n, "-a3-", "only the third attempt's containers on %s", fleet.Hosts[i].Name)
		}
	}

	// Ctrl-C: every rank stopped through its container (it sees
	// SIGTERM), and no container left anywhere.
	d.Signal(t, syscall.SIGINT)
	require.Equal(t, kit.ExitInterrupted, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	for r := range world {
		assert.Contains(t, j.LogFile(t, 3, fmt.Sprintf("worker-%d", r)), fmt.Sprintf("rank %d got TERM\n", r))
		// The rank's own status, through podman: not podman run's 0
		// when it gave up waiting for the container.
		assert.Regexp(t, fmt.Sprintf(`(?m)^worker-%d\s+\S+\s+3\s+143 \(SIGTERM\)\s`, r), d.Stderr.String())
	}
	noContainers := func() {
		t.Helper()
		for i := range containerHosts {
			testenv.Wait(t, 30*time.Second, "no container of the job on "+fleet.Hosts[i].Name, func() (bool, string) {
				left := containersOn(t, i, wd)
				return len(left) == 0, fmt.Sprintf("left: %v", left)
			})
		}
		kit.WaitNoJobProcs(t, j.Name, 10*time.Second)
	}
	noContainers()

	// drover stop of a detached run, from another directory: the same,
	// through the run's supervisor and the agents.
	kit.StartDetachedRun(t, j)
	for i := range containerHosts {
		testenv.Wait(t, 60*time.Second, "the detached run's containers on "+fleet.Hosts[i].Name, func() (bool, string) {
			got := containersOn(t, i, wd)
			return len(got) == containerProcs, fmt.Sprintf("containers: %v", got)
		})
	}
	_, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stop", j.Path)
	require.Equal(t, 0, code, errs)
	noContainers()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// buildTestImage builds, offline, the scenario's image: busybox (static)
// and /etc/drover-image, which only the image has, imported with root's
// podman into a storage of its own and saved as a docker archive.
func buildTestImage(t *testing.T) string {
	t.Helper()
	busybox := testenv.LookPath(t, "busybox")
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "tmp"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	data, err := os.ReadFile(busybox)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755))
	for _, c := range []string{"sh", "sleep", "cat", "echo", "id", "true"} {
		require.NoError(t, os.Symlink("busybox", filepath.Join(root, "bin", c)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "drover-image"), []byte("inside the drover test image\n"), 0o644))
	tarball := filepath.Join(dir, "rootfs.tar")
	img := filepath.Join(dir, "img.tar")
	podman := []string{"podman", "--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
	for _, argv := range [][]string{
		{"tar", "-C", root, "-cf", tarball, "."},
		append(slices.Clone(podman), "import", tarball, "localhost/drover-test-busybox:1"),
		append(slices.Clone(podman), "save", "-o", img, "localhost/drover-test-busybox:1"),
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", argv, out)
	}
	return img
}

// preparePodmanHost gives fleet host i what rootless podman needs there
// (docs/environments.md, Containers), as root in the mount namespace its
// logins share: cgroup (v1) and mqueue mounts, a runtime directory
// /run/user/UID, runc as the runtime; and the image archive in the home.
func preparePodmanHost(t *testing.T, i int, uid, img string) {
	t.Helper()
	script := `set -e
mountpoint -q /sys/fs/cgroup/memory || {
  mount -t tmpfs cgroup /sys/fs/cgroup
  for c in cpu cpuacct cpuset memory devices freezer blkio pids; do mkdir -p /sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c; done
  mkdir -p /sys/fs/cgroup/systemd; mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
}
mountpoint -q /dev/mqueue || { mkdir -p /dev/mqueue; mount -t mqueue mqueue /dev/mqueue; }
mkdir -p /run/user/$1
mountpoint -q /run/user/$1 || mount -t tmpfs -o mode=700,uid=$1,gid=$1 tmpfs /run/user/$1
mkdir -p $2/.config/containers
printf '[engine]\nruntime = "runc"\n' > $2/.config/containers/containers.conf
cp $3 $2/drover-img.tar
chown -R $1:$1 $2/.config $2/drover-img.tar
`
	out, err := fleet.ExecInLogins(i, "sh", "-c", script, "sh", uid, kit.HostHome, img)
	require.NoError(t, err, "prepare podman on %s: %s", fleet.Hosts[i].Name, out)
}

// podmanOn runs the login user's podman on fleet host i.
func podmanOn(i int, args ...string) ([]byte, error) {
	uid := strings.TrimSpace(string(must(exec.Command("id", "-u", fleettest.User).Output())))
	return fleet.ExecInLogins(i, append([]string{"runuser", "-u", fleettest.User, "--", "env", "HOME=" + kit.HostHome, "XDG_RUNTIME_DIR=/run/user/" + uid, "podman"}, args...)...)
}

// containersOn are the names of the containers, running or not, that
// drover started in workdir wd on fleet host i.
func containersOn(t *testing.T, i int, wd string) []string {
	t.Helper()
	out, err := podmanOn(i, "ps", "-a", "--filter", plan.OrphanFilter(wd), "--format", "{{.Names}}")
	require.NoError(t, err)
	return strings.Fields(string(out))
}
