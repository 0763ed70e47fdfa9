package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files under testdata/")

// tl joins lines so that a case's line numbers can be counted: line n of
// the file is argument n.
func tl(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// absTestdata returns the absolute path of a testdata/config entry.
func absTestdata(t *testing.T, parts ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"testdata", "config"}, parts...)...))
	require.NoError(t, err)
	return p
}

// configErrors asserts that err is ConfigErrors and returns it.
func configErrors(t *testing.T, err error) ConfigErrors {
	t.Helper()
	require.Error(t, err)
	assert.True(t, IsConfigError(err), "IsConfigError(%v)", err)
	var ces ConfigErrors
	require.True(t, errors.As(err, &ces), "want ConfigErrors, got %T: %v", err, err)
	return ces
}

func TestLoadFullExample(t *testing.T) {
	t.Setenv("HOME", "/home/tester")
	dir := absTestdata(t, "full")
	cfg, err := Load("testdata/config/full/job.toml", LoadOptions{})
	require.NoError(t, err)

	ssh := func(h Host) Host {
		if h.User == "" {
			h.User = "ubuntu"
		}
		if h.Port == 0 {
			h.Port = 22
		}
		if h.IdentityFile == "" {
			h.IdentityFile = "/home/tester/.ssh/id_ed25519"
		}
		h.KnownHosts = filepath.Join(dir, "keys", "known_hosts")
		if h.Workdir == "" {
			h.Workdir = "drover/mnist" // the job's, filled in by Load
		}
		return h
	}
	want := &Config{
		Path:          filepath.Join(dir, "job.toml"),
		InventoryPath: filepath.Join(dir, "job.toml"),
		Job: Job{
			Name:               "mnist",
			Framework:          PyTorch,
			Command:            []string{"python3", "train.py", "--epochs", "3"},
			Code:               dir,
			Workdir:            "drover/mnist",
			CheckpointDir:      "ckpt",
			CheckpointMarker:   "DONE",
			CheckpointLayout:   LayoutSingle,
			CheckpointCopies:   3,
			CheckpointKeep:     4,
			CheckpointMirror:   filepath.Join(dir, "mirror"),
			CheckpointCopyRate: 50_000_000,
			MaxRestarts:        3,
			ProcsPerHost:       2,
			MasterPort:         29500,
			BasePort:           2222,
			Env:                map[string]string{"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"},
			Exclude:            []string{"data/", "*.pt", "mirror/"},
			SuccessPolicy:      "chief",
			RestartPolicy:      "exit-code",
			RestartBackoff:     2 * time.Second,
			RestartBackoffMax:  time.Minute,
			StopGrace:          15 * time.Second,
			HostWait:           90 * time.Second,
			SetupTimeout:       30 * time.Minute,
			MaxHostFailures:    9,
			GPUMaxUsedMiB:      500,

			MaxRestartsWithoutProgress: 3,
			Health:                     "enforce",
			WebhookFormat:              "json",
			Straggler:                  Straggler{Factor: DefaultStragglerFactor, ClockFactor: DefaultStragglerClockFactor, On: StragglerWarn},
			IgnoreXIDs:                 []int{13, 31, 43, 45, 68, 109},
			MinGPUs:                    1,
		},
		Hosts: []Host{
			ssh(Host{Name: "gpu-a", Address: "10.0.0.11", Transport: TransportSSH, GPUs: GPUSpec{Auto: true}, Line: 35}),
			ssh(Host{Name: "gpu-b", Address: "gpu-b.example.com", Transport: TransportSSH, User: "admin", Port: 2200,
				ProxyJump: "bastion", GPUs: GPUSpec{List: []int{0, 1}}, MinGPUs: 2, Line: 39}),
			ssh(Host{Name: "cpu-c", Address: "fe80::1", Transport: TransportSSH, GPUs: GPUSpec{List: []int{}},
				Workdir: "work/mnist", Line: 47}),
			ssh(Host{Name: "spare-d", Address: "10.0.0.14", Transport: TransportSSH, GPUs: GPUSpec{Auto: true},
				Spare: true, IdentityFile: "/etc/drover/key", Line: 52}),
			ssh(Host{Name: "here", Address: "local", Transport: TransportLocal, GPUs: GPUSpec{Auto: true},
				Workdir: "/tmp/drover-here", Line: 57}),
		},
	}
	assert.Equal(t, want, cfg)
}

func TestLoadDefaults(t *testing.T) {
	dir := absTestdata(t, "minimal")
	cfg, err := Load(filepath.Join(dir, "job.toml"), LoadOptions{})
	require.NoError(t, err)
	want := &Config{
		Path:          filepath.Join(dir, "job.toml"),
		InventoryPath: filepath.Join(dir, "job.toml"),
		Job: Job{
			Name:              "tiny",
			Framework:         Torchrun,
			Command:           []string{"python3", "-c", "print(1)"},
			Code:              dir,
			Workdir:           "drover/tiny",
			CheckpointDir:     "checkpoints",
			CheckpointLayout:  LayoutSingle,
			CheckpointCopies:  2,
			CheckpointKeep:    2,
			MaxRestarts:       3,
			ProcsPerHost:      1,
			MasterPort:        29500,
			BasePort:          2222,
			Env:               map[string]string{},
			SuccessPolicy:     "all-workers",
			RestartPolicy:     "on-failure",
			RestartBackoff:    time.Second,
			RestartBackoffMax: 30 * time.Second,
			StopGrace:         10 * time.Second,
			HostWait:          5 * time.Minute,
			SetupTimeout:      30 * time.Minute,
			MaxHostFailures:   9,
			GPUMaxUsedMiB:     100,

			MaxRestartsWithoutProgress: 3,
			Health:                     "enforce",
			WebhookFormat:              "json",
			Straggler:                  Straggler{Factor: DefaultStragglerFactor, ClockFactor: DefaultStragglerClockFactor, On: StragglerWarn},
			IgnoreXIDs:                 []int{13, 31, 43, 45, 68, 109},
		},
		// Port 0, user "" and no key files: the transport lets
		// ~/.ssh/config, the agent and the current user decide.
		// The workdir is the job's: Load fills it in for every host.
		Hosts: []Host{{Name: "a", Address: "10.0.0.1", Transport: TransportSSH, GPUs: GPUSpec{Auto: true}, Workdir: "drover/tiny", Line: 6}},
	}
	assert.Equal(t, want, cfg)
}

func TestLoadTensorFlowRoles(t *testing.T) {
	cfg, err := Load("testdata/config/tensorflow/job.toml", LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, Roles{Chief: 1, WorkerAuto: true, PS: 1, Evaluator: 1}, cfg.Job.Roles)
	assert.Equal(t, TensorFlow, cfg.Job.Framework)
}

func TestLoadInventoryFile(t *testing.T) {
	dir := absTestdata(t, "inventory")
	cfg, err := Load("testdata/config/inventory/job.toml", LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "job.toml"), cfg.Path)
	assert.Equal(t, filepath.Join(dir, "fleet.toml"), cfg.InventoryPath)
	assert.Equal(t, "inv", cfg.Job.Name)
	// [ssh] of the inventory applies; its relative identity_file is
	// relative to the inventory file.
	key := filepath.Join(dir, "id_fleet")
	assert.Equal(t, []Host{
		{Name: "f1", Address: "10.1.0.1", Transport: TransportSSH, User: "trainer", IdentityFile: key, GPUs: GPUSpec{Auto: true}, Workdir: "drover/inv", Line: 6},
		{Name: "f2", Address: "10.1.0.2", Transport: TransportSSH, User: "trainer", IdentityFile: key, GPUs: GPUSpec{List: []int{3}}, Workdir: "drover/inv", Line: 10},
	}, cfg.Hosts)
}

func TestLoadInventoryOverride(t *testing.T) {
	dir := absTestdata(t, "inventory")
	local := []Host{
		{Name: "l1", Address: "local", Transport: TransportLocal, GPUs: GPUSpec{List: []int{}}, Workdir: "/tmp/drover-l1", Line: 2},
		{Name: "l2", Address: "local", Transport: TransportLocal, GPUs: GPUSpec{List: []int{}}, Workdir: "/tmp/drover-l2", Line: 8},
	}
	for _, job := range []string{"testdata/config/full/job.toml", "testdata/config/inventory/job.toml", "testdata/config/minimal/job.toml"} {
		t.Run(job, func(t *testing.T) {
			cfg, err := Load(job, LoadOptions{InventoryPath: "testdata/config/inventory/local.toml"})
			require.NoError(t, err)
			assert.Equal(t, local, cfg.Hosts, "the job's own hosts, [ssh] and inventory key are all replaced")
			assert.Equal(t, filepath.Join(dir, "local.toml"), cfg.InventoryPath)
			want, err := Load(job, LoadOptions{})
			require.NoError(t, err)
			assert.Equal(t, want.Job, cfg.Job, "the job itself is unchanged")
		})
	}
}

func TestLoadInventoryOverrideErrorsPointAtInventory(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "other.toml")
	require.NoError(t, os.WriteFile(inv, []byte(tl(`[[host]]`, `name = "x"`, `adress = "10.0.0.1"`)), 0o644))
	_, err := Load("testdata/config/minimal/job.toml", LoadOptions{InventoryPath: inv})
	ces := configErrors(t, err)
	require.Len(t, ces, 1, "%v", err)
	assert.Equal(t, inv, ces[0].File)
	assert.Equal(t, 3, ces[0].Line)
	assert.Equal(t, "host[1].adress", ces[0].Key)

	_, err = Load("testdata/config/minimal/job.toml", LoadOptions{InventoryPath: filepath.Join(dir, "missing.toml")})
	ces = configErrors(t, err)
	require.Len(t, ces, 1)
	assert.Contains(t, ces[0].Msg, "no such file")
	assert.Contains(t, ces[0].Fix, "--inventory")
}

func TestLoadExpandsTilde(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	require.NoError(t, os.MkdirAll(filepath.Join(home, "proj"), 0o755))
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(tl(
		`[job]`,
		`name = "t"`,
		`framework = "pytorch"`,
		`command = ["true"]`,
		`code = "~/proj"`,
		`workdir = "~/remote/t"`,
		`[ssh]`,
		`identity_file = "~/.ssh/id_test"`,
		`known_hosts = "~root/kh"`,
		`[[host]]`,
		`name = "a"`,
		`address = "10.0.0.1"`,
		`identity_file = "rel/key"`,
		`[[host]]`,
		`name = "b"`,
		`address = "10.0.0.2"`,
	)), 0o644))
	cfg, err := Load(job, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(home, "proj"), cfg.Job.Code)
	assert.Equal(t, "remote/t", cfg.Job.Workdir, "remote ~/ means the login user's home, which relative paths already are")
	assert.Equal(t, filepath.Join(dir, "rel", "key"), cfg.Hosts[0].IdentityFile, "relative to the file it was written in")
	assert.Equal(t, filepath.Join(home, ".ssh", "id_test"), cfg.Hosts[1].IdentityFile)
	assert.Equal(t, "/root/kh", cfg.Hosts[0].KnownHosts, "~user is that user's home")
}

func TestLoadUnreadableJob(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"), LoadOptions{})
	ces := configErrors(t, err)
	require.Len(t, ces, 1)
	assert.Contains(t, ces[0].Msg, "no such file")
}

// TestLoadReportsEveryError checks that one load reports all problems of a
// file, in line order, and that the messages read well (golden file).
func TestLoadReportsEveryError(t *testing.T) {
	_, err := Load("testdata/config/bad/job.toml", LoadOptions{})
	ces := configErrors(t, err)
	for i := 1; i < len(ces); i++ {
		assert.LessOrEqual(t, ces[i-1].Line, ces[i].Line, "errors in line order")
	}
	for _, e := range ces {
		assert.Equal(t, "testdata/config/bad/job.toml", e.File)
		assert.NotZero(t, e.Line, "%v", e)
		assert.NotEmpty(t, e.Fix, "%v", e)
	}
	golden := filepath.Join("testdata", "config", "bad", "errors.golden")
	got := err.Error() + "\n"
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, rerr := os.ReadFile(golden)
	require.NoError(t, rerr, "run go test -run TestLoadReportsEveryError -update ./cluster/ to create it")
	assert.Equal(t, string(want), got)
}

// Pieces of valid files; a case's line numbers count from 1 over them.
var (
	jobHead = []string{ // lines 1-4
		`[job]`,
		`name = "j"`,
		`framework = "pytorch"`,
		`command = ["python3", "t.py"]`,
	}
	hostA = []string{`[[host]]`, `name = "a"`, `address = "10.0.0.1"`}
	hostB = []string{`[[host]]`, `name = "b"`, `address = "10.0.0.2"`}
)

func joinParts(parts ...[]string) string {
	var all []string
	for _, p := range parts {
		all = append(all, p...)
	}
	return tl(all...)
}

func lns(s ...string) []string { return s }

// errorCase is one invalid input and the single error it must produce.
type errorCase struct {
	name  string
	job   string
	files map[string]string // more files next to job.toml
	opts  LoadOptions
	file  string // base name of the file the error is in; "" = job.toml
	line  int
	key   string
	msg   string // substring of Msg
	fix   string // substring of Fix
}

var errorCases = []errorCase{
	{name: "syntax", job: tl(`[job]`, `name = "j`, `framework = "pytorch"`),
		line: 2, msg: "invalid TOML", fix: "line 2"},
	{name: "duplicate key", job: joinParts(jobHead, lns(`name = "k"`), hostA),
		line: 5, msg: "already been defined", fix: "only once"},
	{name: "unknown job key", job: joinParts(jobHead, lns(`max_restart = 3`), hostA),
		line: 5, key: "job.max_restart", msg: "unknown key", fix: `did you mean "max_restarts"?`},
	{name: "typo of required key reported once", job: joinParts(lns(`[job]`, `name = "j"`, `framwork = "pytorch"`, `command = ["x"]`), hostA),
		line: 3, key: "job.framwork", fix: `did you mean "framework"?`},
	{name: "unknown host key", job: joinParts(jobHead, hostA, lns(`gpu = "auto"`)),
		line: 8, key: "host[1].gpu", fix: `did you mean "gpus"?`},
	{name: "key in wrong table", job: joinParts(jobHead, lns(`user = "ubuntu"`), hostA),
		line: 5, key: "job.user", fix: "belongs in [ssh]"},
	{name: "top-level key outside job", job: joinParts(lns(`framework = "pytorch"`), jobHead[:2], jobHead[3:], hostA),
		line: 1, key: "framework", fix: "belongs in [job]"},
	{name: "unknown key without suggestion", job: joinParts(jobHead, lns(`colour = "red"`), hostA),
		line: 5, key: "job.colour", fix: "[job] accepts name, framework"},
	{name: "typo table", job: joinParts(lns(`[jobs]`), jobHead[1:], hostA),
		line: 1, key: "jobs", fix: `did you mean "job"?`},
	{name: "missing job", job: joinParts(hostA),
		key: "job", msg: "missing [job]", fix: `name = "mnist"`},
	{name: "missing name", job: joinParts(jobHead[:1], jobHead[2:], hostA),
		line: 1, key: "job.name", fix: `name = "mnist"`},
	{name: "bad job name", job: joinParts(jobHead[:1], lns(`name = "my job"`), jobHead[2:], hostA),
		line: 2, key: "job.name", fix: `name = "my-job"`},
	{name: "missing framework", job: joinParts(jobHead[:2], jobHead[3:], hostA),
		line: 1, key: "job.framework", fix: `framework = "pytorch"`},
	{name: "unknown framework", job: joinParts(jobHead[:2], lns(`framework = "pytorh"`), jobHead[3:], hostA),
		line: 3, key: "job.framework", msg: `"pytorh"`, fix: `did you mean framework = "pytorch"?`},
	{name: "framework wrong type", job: joinParts(jobHead[:2], lns(`framework = 1`), jobHead[3:], hostA),
		line: 3, key: "job.framework", msg: "not an integer", fix: `framework = "pytorch"`},
	{name: "missing command", job: joinParts(jobHead[:3], hostA),
		line: 1, key: "job.command", fix: `command = ["python3", "train.py"]`},
	{name: "empty command", job: joinParts(jobHead[:3], lns(`command = []`), hostA),
		line: 4, key: "job.command", msg: "empty", fix: `command = [`},
	{name: "command as string", job: joinParts(jobHead[:3], lns(`command = "python3 t.py -n 3"`), hostA),
		line: 4, key: "job.command", msg: "not a string", fix: `command = ["python3", "t.py", "-n", "3"]`},
	{name: "command element not string", job: joinParts(jobHead[:3], lns(`command = ["python3", 3]`), hostA),
		line: 4, key: "job.command", msg: "element 2", fix: "quote every element"},
	{name: "negative max_restarts", job: joinParts(jobHead, lns(`max_restarts = -1`), hostA),
		line: 5, key: "job.max_restarts", msg: "negative", fix: "max_restarts = 3"},
	{name: "zero procs_per_host", job: joinParts(jobHead, lns(`procs_per_host = 0`), hostA),
		line: 5, key: "job.procs_per_host", msg: "between 1", fix: "procs_per_host = 2"},
	{name: "master_port out of range", job: joinParts(jobHead, lns(`master_port = 70000`), hostA),
		line: 5, key: "job.master_port", msg: "1 and 65535", fix: "master_port = 29500"},
	{name: "base_port zero", job: joinParts(jobHead, lns(`base_port = 0`), hostA),
		line: 5, key: "job.base_port", msg: "1 and 65535", fix: "base_port = 2222"},
	{name: "ssh port wrong type", job: joinParts(jobHead, lns(`[ssh]`, `port = "x"`), hostA),
		line: 6, key: "ssh.port", msg: "not a string", fix: "port = 22"},
	{name: "host port out of range", job: joinParts(jobHead, hostA, lns(`port = 65536`)),
		line: 8, key: "host[1].port", msg: "1 and 65535", fix: "port = 22"},
	{name: "unknown restart policy", job: joinParts(jobHead, lns(`restart_policy = "always"`), hostA),
		line: 5, key: "job.restart_policy", fix: `restart_policy = "on-failure", restart_policy = "never"`},
	{name: "unknown success policy", job: joinParts(jobHead, lns(`success_policy = "cheif"`), hostA),
		line: 5, key: "job.success_policy", fix: `did you mean success_policy = "chief"?`},
	{name: "bad duration", job: joinParts(jobHead, lns(`stop_grace = "10"`), hostA),
		line: 5, key: "job.stop_grace", msg: "not a duration", fix: `stop_grace = "10s"`},
	{name: "duration as number", job: joinParts(jobHead, lns(`host_wait = 300`), hostA),
		line: 5, key: "job.host_wait", msg: "duration string", fix: `host_wait = "5m"`},
	{name: "hang_timeout not a duration", job: joinParts(jobHead, lns(`hang_timeout = "ten"`), hostA),
		line: 5, key: "job.hang_timeout", msg: "not a duration", fix: `hang_timeout = "30m"`},
	{name: "exit code out of range", job: joinParts(jobHead, lns(`retry_exit_codes = [75, 300]`), hostA),
		line: 5, key: "job.retry_exit_codes", msg: "element 2 (300) is not an exit status", fix: "137 for SIGKILL"},
	{name: "exit codes not a list", job: joinParts(jobHead, lns(`fatal_exit_codes = 2`), hostA),
		line: 5, key: "job.fatal_exit_codes", msg: "array of exit statuses", fix: "fatal_exit_codes = [2, 64]"},
	{name: "exit code retried and fatal", job: joinParts(jobHead, lns(`retry_exit_codes = [75]`, `fatal_exit_codes = [75]`), hostA),
		line: 6, key: "job.fatal_exit_codes", msg: "exit status 75 is in both", fix: "remove 75"},
	{name: "negative max_host_failures", job: joinParts(jobHead, lns(`max_host_failures = -1`), hostA),
		line: 5, key: "job.max_host_failures", msg: "negative", fix: "max_host_failures = 9"},
	{name: "negative max_restarts_without_progress", job: joinParts(jobHead, lns(`max_restarts_without_progress = -1`), hostA),
		line: 5, key: "job.max_restarts_without_progress", msg: "negative", fix: "max_restarts_without_progress = 3"},
	{name: "unknown health", job: joinParts(jobHead, lns(`max_restarts = 1`, `health = "enforced"`), hostA),
		line: 6, key: "job.health", msg: `unknown health "enforced"`, fix: `did you mean health = "enforce"?`},
	{name: "ignore_xids not numbers", job: joinParts(jobHead, lns(`ignore_xids = ["13"]`), hostA),
		line: 5, key: "job.ignore_xids", msg: "not an Xid between 1 and 999", fix: "ignore_xids = [13, 31, 43, 45, 68, 109]"},
	{name: "ignore_xids not an array", job: joinParts(jobHead, lns(`ignore_xids = 13`), hostA),
		line: 5, key: "job.ignore_xids", msg: "array of Xid numbers", fix: "ignore_xids = [13"},
	{name: "negative duration", job: joinParts(jobHead, lns(`restart_backoff = "-1s"`), hostA),
		line: 5, key: "job.restart_backoff", msg: "negative", fix: `restart_backoff = "1s"`},
	{name: "backoff max below backoff", job: joinParts(jobHead, lns(`restart_backoff = "1m"`, `restart_backoff_max = "10s"`), hostA),
		line: 6, key: "job.restart_backoff_max", msg: "shorter", fix: `restart_backoff_max = "1m0s"`},
	{name: "negative gpu_max_used_mib", job: joinParts(jobHead, lns(`gpu_max_used_mib = -5`), hostA),
		line: 5, key: "job.gpu_max_used_mib", msg: "negative", fix: "gpu_max_used_mib = 100"},
	{name: "negative job min_gpus", job: joinParts(jobHead, lns(`min_gpus = -1`), hostA),
		line: 5, key: "job.min_gpus", msg: "negative", fix: "min_gpus = 1"},
	{name: "remote ~user workdir", job: joinParts(jobHead, lns(`workdir = "~bob/x"`), hostA),
		line: 5, key: "job.workdir", msg: "~user", fix: `workdir = "drover/mnist"`},
	{name: "empty checkpoint_dir", job: joinParts(jobHead, lns(`checkpoint_dir = ""`), hostA),
		line: 5, key: "job.checkpoint_dir", msg: "empty", fix: `checkpoint_dir = "checkpoints"`},
	{name: "checkpoint_marker with slash", job: joinParts(jobHead, lns(`checkpoint_marker = "a/DONE"`), hostA),
		line: 5, key: "job.checkpoint_marker", msg: "not a file name", fix: `checkpoint_marker = "DONE"`},
	{name: "checkpoint_layout unknown", job: joinParts(jobHead, lns(`checkpoint_layout = "dcp"`), hostA),
		line: 5, key: "job.checkpoint_layout", msg: "not a checkpoint layout", fix: `checkpoint_layout = "sharded"`},
	{name: "checkpoint_copies zero", job: joinParts(jobHead, lns(`checkpoint_copies = 0`), hostA),
		line: 5, key: "job.checkpoint_copies", msg: "between 1 and 64", fix: "checkpoint_copies = 2"},
	{name: "checkpoint_keep as string", job: joinParts(jobHead, lns(`checkpoint_keep = "2"`), hostA),
		line: 5, key: "job.checkpoint_keep", msg: "not a string", fix: "checkpoint_keep = 2"},
	{name: "checkpoint_mirror not a string", job: joinParts(jobHead, lns(`checkpoint_mirror = 1`), hostA),
		line: 5, key: "job.checkpoint_mirror", msg: "string", fix: `checkpoint_mirror = "../checkpoint-mirror"`},
	{name: "checkpoint_copy_rate without /s", job: joinParts(jobHead, lns(`checkpoint_copy_rate = "50MB"`), hostA),
		line: 5, key: "job.checkpoint_copy_rate", msg: "must end in /s", fix: `checkpoint_copy_rate = "50MB/s"`},
	{name: "checkpoint_copy_rate unknown unit", job: joinParts(jobHead, lns(`checkpoint_copy_rate = "50Mb/s"`), hostA),
		line: 5, key: "job.checkpoint_copy_rate", msg: `unknown unit "Mb"`, fix: `"0" for no cap`},
	{name: "checkpoint_copy_rate as number", job: joinParts(jobHead, lns(`checkpoint_copy_rate = 50`), hostA),
		line: 5, key: "job.checkpoint_copy_rate", msg: "rate string", fix: `checkpoint_copy_rate = "50MB/s"`},
	{name: "checkpoint_copy_rate negative", job: joinParts(jobHead, lns(`checkpoint_copy_rate = "-5MB/s"`), hostA),
		line: 5, key: "job.checkpoint_copy_rate", msg: "start with a number", fix: `checkpoint_copy_rate = "50MB/s"`},
	{name: "exclude not a list", job: joinParts(jobHead, lns(`exclude = "data/"`), hostA),
		line: 5, key: "job.exclude", msg: "array of strings", fix: `exclude = ["data/", "*.pt"]`},
	{name: "exclude empty pattern", job: joinParts(jobHead, lns(`exclude = ["data/", ""]`), hostA),
		line: 5, key: "job.exclude", msg: "empty pattern", fix: `remove the ""`},
	{name: "code missing", job: joinParts(jobHead, lns(`code = "nosuchdir"`), hostA),
		line: 5, key: "job.code", msg: "no such file", fix: `code = "."`},
	{name: "code is a file", job: joinParts(jobHead, lns(`code = "job.toml"`), hostA),
		line: 5, key: "job.code", msg: "not a directory", fix: `code = "."`},
	{name: "env bad name", job: joinParts(jobHead, lns(`[job.env]`, `"1X" = "a"`), hostA),
		line: 6, key: "job.env.1X", msg: "not a valid environment variable name", fix: "_1X"},
	{name: "env reserved", job: joinParts(jobHead, lns(`[job.env]`, `RANK = "0"`), hostA),
		line: 6, key: "job.env.RANK", msg: "drover sets RANK itself for pytorch jobs", fix: "remove it from [job.env]"},
	{name: "env reserved drover", job: joinParts(jobHead, lns(`[job.env]`, `DROVER_HOST = "x"`), hostA),
		line: 6, key: "job.env.DROVER_HOST", msg: "drover sets DROVER_HOST itself", fix: "remove it"},
	{name: "env GPUs", job: joinParts(jobHead, lns(`[job.env]`, `CUDA_VISIBLE_DEVICES = "0"`), hostA),
		line: 6, key: "job.env.CUDA_VISIBLE_DEVICES", msg: "drover sets CUDA_VISIBLE_DEVICES", fix: "gpus = [...]"},
	{name: "env value array", job: joinParts(jobHead, lns(`[job.env]`, `A = ["x"]`), hostA),
		line: 6, key: "job.env.A", msg: "not an array", fix: `A = "value"`},
	{name: "env not a table", job: joinParts(jobHead, lns(`env = "A=1"`), hostA),
		line: 5, key: "job.env", msg: "must be a table", fix: "[job.env]"},
	{name: "host env bad name", job: joinParts(jobHead, hostA, lns(`[host.env]`, `PATH = "/opt/py/bin:/usr/bin"`, `"A-B" = "x"`)),
		line: 10, key: "host[1].env.A-B", msg: "not a valid environment variable name", fix: "A_B"},
	{name: "host env value table", job: joinParts(jobHead, hostA, hostB, lns(`[host.env]`, `X = {a = 1}`)),
		line: 12, key: "host[2].env.X", msg: "must be a string", fix: `X = "value"`},
	{name: "host env sets what drover sets", job: joinParts(jobHead, hostA, lns(`[host.env]`, `PATH = "/opt/py/bin"`, `RANK = "3"`)),
		line: 10, key: "host[1].env.RANK", msg: "drover sets RANK itself for pytorch jobs", fix: "remove it from [host.env]"},
	{name: "roles on pytorch", job: joinParts(jobHead, lns(`[job.roles]`, `worker = 2`), hostA),
		line: 5, key: "job.roles", msg: `framework is "pytorch"`, fix: `roles are for tensorflow; remove [job.roles] or set framework = "tensorflow"`},
	{name: "tensorflow without roles", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], hostA),
		line: 1, key: "job.roles", msg: "chief or at least one worker", fix: `[job.roles]`},
	{name: "tensorflow only ps", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], lns(`[job.roles]`, `ps = 1`), hostA),
		line: 5, key: "job.roles", msg: "chief or at least one worker", fix: `worker = "auto"`},
	{name: "two chiefs", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], lns(`[job.roles]`, `chief = 2`, `worker = 1`), hostA),
		line: 6, key: "job.roles.chief", msg: "at most one chief", fix: "chief = 1"},
	{name: "worker not auto", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], lns(`[job.roles]`, `chief = 1`, `worker = "all"`), hostA),
		line: 7, key: "job.roles.worker", fix: `worker = "auto"`},
	{name: "negative ps", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], lns(`[job.roles]`, `chief = 1`, `ps = -1`), hostA),
		line: 7, key: "job.roles.ps", msg: "negative", fix: "ps = 1"},
	{name: "unknown role", job: joinParts(jobHead[:2], lns(`framework = "tensorflow"`), jobHead[3:], lns(`[job.roles]`, `chief = 1`, `workers = 2`), hostA),
		line: 7, key: "job.roles.workers", fix: `did you mean "worker"?`},
	{name: "no hosts", job: joinParts(jobHead),
		key: "host", msg: "no hosts", fix: "[[host]]"},
	{name: "host as single table", job: joinParts(jobHead, lns(`[host]`, `name = "a"`, `address = "x"`)),
		line: 5, key: "host", msg: "single table", fix: "[[host]]"},
	{name: "all hosts spare", job: joinParts(jobHead, hostA, lns(`spare = true`)),
		key: "host", msg: "every host is a spare", fix: "remove spare = true"},
	{name: "spare wrong type", job: joinParts(jobHead, hostA, lns(`spare = "yes"`)),
		line: 8, key: "host[1].spare", msg: "true or false", fix: "spare = true"},
	{name: "missing host name", job: joinParts(jobHead, hostA, lns(`[[host]]`, `address = "10.0.0.2"`)),
		line: 8, key: "host[2].name", fix: `name = "gpu-a"`},
	{name: "bad host name", job: joinParts(jobHead, lns(`[[host]]`, `name = "gpu/a"`, `address = "10.0.0.2"`)),
		line: 6, key: "host[1].name", msg: "only letters", fix: `name = "gpu-a"`},
	{name: "missing address", job: joinParts(jobHead, lns(`[[host]]`, `name = "a"`)),
		line: 5, key: "host[1].address", msg: `host "a"`, fix: `address = "10.0.0.11"`},
	{name: "address with user", job: joinParts(jobHead, lns(`[[host]]`, `name = "a"`, `address = "me@10.0.0.1"`)),
		line: 7, key: "host[1].address", msg: "includes a user", fix: `user = "me" and address = "10.0.0.1"`},
	{name: "address with port", job: joinParts(jobHead, lns(`[[host]]`, `name = "a"`, `address = "10.0.0.1:2222"`)),
		line: 7, key: "host[1].address", msg: "includes a port", fix: `address = "10.0.0.1" and port = 2222`},
	{name: "address with space", job: joinParts(jobHead, lns(`[[host]]`, `name = "a"`, `address = "gpu a"`)),
		line: 7, key: "host[1].address", msg: "not an IP", fix: `address = "10.0.0.11"`},
	{name: "unknown transport", job: joinParts(jobHead, hostA, lns(`transport = "sftp"`)),
		line: 8, key: "host[1].transport", fix: `transport = "ssh"`},
	{name: "ssh transport to local", job: joinParts(jobHead, lns(`[[host]]`, `name = "a"`, `address = "local"`, `transport = "ssh"`)),
		line: 8, key: "host[1].transport", fix: `transport = "local"`},
	{name: "duplicate host name", job: joinParts(jobHead, hostA, lns(`[[host]]`, `name = "a"`, `address = "10.0.0.2"`)),
		line: 9, key: "host[2].name", msg: "first at line 5", fix: `name = "a-2"`},
	{name: "duplicate address", job: joinParts(jobHead, hostA, lns(`[[host]]`, `name = "b"`, `address = "10.0.0.1"`)),
		line: 10, key: "host[2].address", msg: `same address and port as host "a" (line 5)`, fix: "list each machine once"},
	{name: "gpus all", job: joinParts(jobHead, hostA, lns(`gpus = "all"`)),
		line: 8, key: "host[1].gpus", msg: `"all"`, fix: `gpus = "auto"`},
	{name: "gpus count", job: joinParts(jobHead, hostA, lns(`gpus = 3`)),
		line: 8, key: "host[1].gpus", msg: "not a list", fix: `gpus = [0, 1, 2]`},
	{name: "gpus negative index", job: joinParts(jobHead, hostA, lns(`gpus = [0, -1]`)),
		line: 8, key: "host[1].gpus", msg: "out of range", fix: "start at 0"},
	{name: "gpus repeated", job: joinParts(jobHead, hostA, lns(`gpus = [1, 1]`)),
		line: 8, key: "host[1].gpus", msg: "listed twice", fix: "once"},
	{name: "gpus string element", job: joinParts(jobHead, hostA, lns(`gpus = ["0"]`)),
		line: 8, key: "host[1].gpus", msg: "element 1", fix: `gpus = [0, 1]`},
	{name: "host min_gpus negative", job: joinParts(jobHead, hostA, lns(`min_gpus = -2`)),
		line: 8, key: "host[1].min_gpus", msg: "negative", fix: "min_gpus = 1"},
	{name: "user with host", job: joinParts(jobHead, hostA, lns(`user = "me@there"`)),
		line: 8, key: "host[1].user", msg: "'@'", fix: `user = "ubuntu"`},
	{name: "proxy jump to itself", job: joinParts(jobHead, hostA, lns(`proxy_jump = "a"`)),
		line: 8, key: "host[1].proxy_jump", msg: "itself", fix: "bastion"},
	{name: "inline host table", job: joinParts(lns(`host = [`, `  {name = "a", address = "10.0.0.1"},`, `  {name = "b", adress = "10.0.0.2"},`, `]`), jobHead),
		line: 3, key: "host[2].adress", fix: `did you mean "address"?`},
	{name: "inventory and hosts", job: joinParts(lns(`inventory = "fleet.toml"`), jobHead, hostA),
		files: map[string]string{"fleet.toml": joinParts(hostB)},
		line:  1, key: "inventory", msg: "both inventory and [[host]]", fix: "move the [[host]] tables into fleet.toml"},
	{name: "inventory and ssh", job: joinParts(lns(`inventory = "fleet.toml"`), jobHead, lns(`[ssh]`, `user = "x"`)),
		files: map[string]string{"fleet.toml": joinParts(hostB)},
		line:  6, key: "ssh", fix: "move the [ssh] table into fleet.toml"},
	{name: "inventory missing", job: joinParts(lns(`inventory = "nofleet.toml"`), jobHead),
		line: 1, key: "inventory", msg: "no such file", fix: "relative to the job file"},
	{name: "inventory holds a job", job: joinParts(lns(`inventory = "fleet.toml"`), jobHead),
		files: map[string]string{"fleet.toml": joinParts(hostB, lns(`[job]`, `name = "x"`))},
		file:  "fleet.toml", line: 4, key: "job", fix: "only [ssh] and [[host]]"},
	{name: "inventory error located in inventory", job: joinParts(lns(`inventory = "fleet.toml"`), jobHead),
		files: map[string]string{"fleet.toml": joinParts(lns(`[ssh]`, `port = 0`), hostB)},
		file:  "fleet.toml", line: 2, key: "ssh.port", msg: "1 and 65535", fix: "port = 22"},
	{name: "inventory syntax error", job: joinParts(lns(`inventory = "fleet.toml"`), jobHead),
		files: map[string]string{"fleet.toml": joinParts(hostB, lns(`gpus = [0,`))},
		file:  "fleet.toml", line: 4, msg: "invalid TOML"},
	{name: "--inventory replaces a broken inventory key", job: joinParts(lns(`inventory = "nofleet.toml"`), jobHead),
		files: map[string]string{"other.toml": joinParts(hostB, lns(`port = -1`))},
		opts:  LoadOptions{InventoryPath: "other.toml"},
		file:  "other.toml", line: 4, key: "host[1].port", msg: "negative", fix: "port = 22"},
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := filepath.Join(dir, "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(tc.job), 0o644))
			for name, src := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
			}
			opts := tc.opts
			if opts.InventoryPath != "" {
				opts.InventoryPath = filepath.Join(dir, opts.InventoryPath)
			}
			cfg, err := Load(job, opts)
			assert.Nil(t, cfg)
			ces := configErrors(t, err)
			require.Len(t, ces, 1, "want exactly one error, got:\n%v", err)
			e := ces[0]
			wantFile := "job.toml"
			if tc.file != "" {
				wantFile = tc.file
			}
			assert.Equal(t, filepath.Join(dir, wantFile), e.File, "file")
			assert.Equal(t, tc.line, e.Line, "line of %v", e)
			assert.Equal(t, tc.key, e.Key, "key of %v", e)
			assert.Contains(t, e.Msg, tc.msg, "msg of %v", e)
			assert.NotEmpty(t, e.Fix, "every error says how to fix it: %v", e)
			assert.Contains(t, e.Fix, tc.fix, "fix of %v", e)
		})
	}
}

func TestLocateKeys(t *testing.T) {
	src := tl(
		`# comment [not] = a table`,       // 1
		`top = 1`,                         // 2
		`[job]`,                           // 3
		`name = """`,                      // 4
		`multi = "line" [[x]]`,            // 5
		`"""`,                             // 6
		`cmd = [`,                         // 7
		`  "a", # comment`,                // 8
		`  'b]',`,                         // 9
		`]`,                               // 10
		`"quoted.key" = 1`,                // 11
		`dotted.inner = 2`,                // 12
		`[job.env]`,                       // 13
		`A = '''`,                         // 14
		`x = 1'''`,                        // 15
		`[[host]]`,                        // 16
		`name = "a"`,                      // 17
		`[[host]]`,                        // 18
		`ssh = { user = "u",`,             // 19
		`        port = 22 }`,             // 20
		`tags = [{ k = 1 }, { k = 2 }]`,   // 21
		`  [ "sp aced" . x ]`,             // 22
		`y = 1979-05-27 07:32:00Z # date`, // 23
	)
	kl := locateKeys([]byte(src))
	for key, line := range map[string]int{
		"top":               2,
		"job":               3,
		"job.name":          4,
		"job.cmd":           7,
		"job.quoted.key":    11,
		"job.dotted":        12,
		"job.dotted.inner":  12,
		"job.env":           13,
		"job.env.A":         14,
		"host[1]":           16,
		"host[1].name":      17,
		"host[2]":           18,
		"host[2].ssh":       19,
		"host[2].ssh.user":  19,
		"host[2].ssh.port":  20,
		"host[2].tags[2]":   21,
		"host[2].tags[2].k": 21,
		"sp aced.x":         22,
		"sp aced.x.y":       23,
	} {
		assert.Equal(t, line, kl[key], "line of %s", key)
	}
	for _, absent := range []string{"job.multi", "job.env.x", "x", "not"} {
		assert.NotContains(t, kl, absent, "%s is inside a string or comment", absent)
	}
	assert.Equal(t, 17, kl.lineOf("host[1].name"))
	assert.Equal(t, 18, kl.lineOf("host[2].address"), "missing key: its table's line")
	assert.Equal(t, 0, kl.lineOf("nothing.here"))
}

func TestSuggest(t *testing.T) {
	known := jobSchema.names()
	for in, want := range map[string]string{
		"nmae":           "name",
		"Name":           "name",
		"max-restarts":   "max_restarts",
		"frameworks":     "framework",
		"checkpointdir":  "checkpoint_dir",
		"zzz":            "",
		"completely_off": "",
		"nam":            "name",
	} {
		assert.Equal(t, want, suggest(in, known), "suggest(%q)", in)
	}
}

func TestConfigErrorMessage(t *testing.T) {
	_, err := Load("testdata/config/bad/job.toml", LoadOptions{})
	ces := configErrors(t, err)
	// The rendered message carries file:line, key and fix.
	assert.Contains(t, ces[0].Error(), "testdata/config/bad/job.toml:")
	for _, e := range ces {
		assert.Contains(t, err.Error(), e.Error())
	}
}

// An inventory file on its own is enough for commands that only reach the
// hosts (exec, probe), but never for one that needs the job.
func TestLoadHostsOnly(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.toml")
	require.NoError(t, os.WriteFile(inv, []byte("[ssh]\nuser = \"u\"\n\n[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\ngpus = []\n"), 0o644))

	cfg, err := Load(inv, LoadOptions{HostsOnly: true})
	require.NoError(t, err)
	require.Len(t, cfg.Hosts, 1)
	assert.Equal(t, "u", cfg.Hosts[0].User)
	assert.Equal(t, inv, cfg.InventoryPath)

	_, err = Load(inv, LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing [job] table")

	// A [job] table that is there is still checked.
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[job]\nname = \"j\"\nframwork = \"pytorch\"\n\n[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n"), 0o644))
	_, err = Load(bad, LoadOptions{HostsOnly: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "framwork")
}

func TestLoadRecoveryKeys(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lns(`max_restarts = 2`, `hang_timeout = "90s"`,
		`retry_exit_codes = [75, 143]`, `fatal_exit_codes = [2]`), hostA)), 0o644))
	cfg, err := Load(job, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.Job.HangTimeout)
	assert.Equal(t, []int{75, 143}, cfg.Job.RetryExitCodes)
	assert.Equal(t, []int{2}, cfg.Job.FatalExitCodes)
	assert.Equal(t, 6, cfg.Job.MaxHostFailures, "3 x max_restarts by default")
	assert.Equal(t, 3, cfg.Job.MaxRestartsWithoutProgress, "default")
	assert.Equal(t, HealthEnforce, cfg.Job.Health, "default")

	require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lns(`max_restarts_without_progress = 0`, `health = "warn"`,
		`ignore_xids = [13, 94]`), hostA)), 0o644))
	cfg, err = Load(job, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, cfg.Job.MaxRestartsWithoutProgress)
	assert.Equal(t, HealthWarn, cfg.Job.Health)
	assert.Equal(t, []int{13, 94}, cfg.Job.IgnoreXIDs)
}

// checkpoint_layout = "sharded" is read, and its marker defaults to DCP's
// .metadata unless checkpoint_marker names another.
func TestLoadShardedLayout(t *testing.T) {
	for _, tc := range []struct {
		lines  []string
		marker string
	}{
		{lns(`checkpoint_layout = "sharded"`), ".metadata"},
		{lns(`checkpoint_layout = "sharded"`, `checkpoint_marker = "DONE"`), "DONE"},
	} {
		job := filepath.Join(t.TempDir(), "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, tc.lines, hostA)), 0o644))
		cfg, err := Load(job, LoadOptions{})
		require.NoError(t, err)
		assert.Equal(t, LayoutSharded, cfg.Job.CheckpointLayout)
		assert.Equal(t, tc.marker, cfg.Job.CheckpointMarker)
	}
}
