package plan

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenPlans are the plans whose renderings are pinned, one per
// framework, loaded from the TOML fixtures under testdata.
func goldenPlans(t *testing.T) map[string]*Plan {
	t.Helper()
	load := func(name string) *config.Config {
		c, err := config.Load(filepath.Join("testdata", name+".toml"), config.LoadOptions{})
		require.NoError(t, err)
		return c
	}
	tracked := load("pytorch")
	tracked.Job.Tracker = config.TrackerWandb
	return map[string]*Plan{
		"pytorch": mustBuild(t, PlanInput{Config: tracked, RunID: goldenRunID, Attempt: 1}),
		"torchrun": mustBuild(t, PlanInput{Config: load("torchrun"), RestartCount: 1, RunID: goldenRunID, Attempt: 2,
			ResumeFrom: "/home/u/drover/llm/checkpoints/step-100",
			HostHome:   map[string]string{"gpu-a": "/home/u", "gpu-b": "/home/u"}}),
		"tensorflow": mustBuild(t, PlanInput{Config: load("tensorflow")}),
	}
}

// goldenRunID is the run id the golden plans are built with.
const goldenRunID = "20260102-030405-a1b2c3"

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
		require.NoError(t, os.WriteFile(file, got, 0o644))
		return
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "run go test ./launcher -run Golden -update to create it")
	assert.Equal(t, string(want), string(got), "rendering differs from %s (rerun with -update if intended)", file)
}

func TestRenderGolden(t *testing.T) {
	for name, p := range goldenPlans(t) {
		for _, f := range Formats() {
			t.Run(name+"/"+string(f), func(t *testing.T) {
				var buf bytes.Buffer
				require.NoError(t, Render(&buf, p, f, RenderOptions{}))
				checkGolden(t, name+"."+string(f), buf.Bytes())
			})
		}
	}
}

// TestRenderEnvRoundTrip runs the env rendering through a real POSIX shell
// and checks that every variable and every argument reaches the process
// byte for byte, and that nothing in a value is executed.
func TestRenderEnvRoundTrip(t *testing.T) {
	sh := testenv.LookPath(t, "sh")
	dir := t.TempDir()
	workdir := filepath.Join(dir, "work dir 'quoted'")
	require.NoError(t, os.Mkdir(workdir, 0o755))
	pwned := filepath.Join(dir, "pwned")
	nasty := []string{
		"two words", `it's "quoted"`, "$(touch " + pwned + ")", "`touch " + pwned + "`",
		"line1\nline2\n", "trailing newlines\n\n", `back\slash \n`, "", "'", "''", `"`, "$HOME ${PATH}",
		"semi; touch " + pwned, "tab\there", "ünïcødé ✓", "*", "-n", "=x=",
	}
	c := testConfig(config.PyTorch, localHost("l0", workdir))
	c.Job.Env = map[string]string{}
	for i, v := range nasty {
		c.Job.Env["V"+string(rune('A'+i))] = v
	}
	c.Job.Env["API_TOKEN"] = "secret 'value'\n"
	script := `for a in "$@"; do printf '%s\0' "$a"; done > args.bin; env -0 > env.bin; pwd > pwd.txt`
	c.Job.Command = append([]string{"sh", "-c", script, "sh"}, nasty...)
	p := mustBuild(t, PlanInput{Config: c, ResumeFrom: "/ck/it's here\n"})
	require.Len(t, p.Processes, 1)
	pr := p.Processes[0]

	var buf bytes.Buffer
	require.NoError(t, RenderEnv(&buf, p, RenderOptions{ShowSecrets: true}))
	cmd := exec.Command(sh, "-c", buf.String())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "rendered env failed in sh:\n%s\n%s", out, buf.String())

	_, err = os.Stat(pwned)
	assert.True(t, os.IsNotExist(err), "a value was executed by the shell")

	args, err := os.ReadFile(filepath.Join(workdir, "args.bin"))
	require.NoError(t, err)
	gotArgs := strings.Split(strings.TrimSuffix(string(args), "\x00"), "\x00")
	assert.Equal(t, nasty, gotArgs)

	envb, err := os.ReadFile(filepath.Join(workdir, "env.bin"))
	require.NoError(t, err)
	gotEnv := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(envb), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		gotEnv[k] = v
	}
	require.NotEmpty(t, pr.Env)
	for k, want := range pr.Env {
		got, ok := gotEnv[k]
		if assert.True(t, ok, "%s missing", k) {
			assert.Equal(t, []byte(want), []byte(got), "%s", k)
		}
	}
	pwd, err := os.ReadFile(filepath.Join(workdir, "pwd.txt"))
	require.NoError(t, err)
	assert.Equal(t, workdir+"\n", string(pwd))
}

// TestRenderEnvRelativeWorkdir checks that a relative workdir is entered
// under $HOME whatever the current directory.
func TestRenderEnvRelativeWorkdir(t *testing.T) {
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, "drover", "my job"), 0o755))
	h := gpuHost("a", "10.0.0.1", 0)
	h.Workdir = "drover/my job"
	c := testConfig(config.PyTorch, h)
	c.Job.CheckpointDir = "ck pt"
	c.Job.HangTimeout = time.Minute
	c.Job.Command = []string{"sh", "-c", `pwd; echo "$DROVER_CHECKPOINT_DIR"; echo "$TORCHELASTIC_ERROR_FILE"; echo "$DROVER_PROGRESS_FILE"`}
	p := mustBuild(t, PlanInput{Config: c})
	var buf bytes.Buffer
	require.NoError(t, RenderEnv(&buf, p, RenderOptions{}))
	cmd := exec.Command("sh", "-c", buf.String())
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	out, err := cmd.Output()
	require.NoError(t, err, buf.String())
	// The workdir, the checkpoint directory, the error file and the
	// progress file are absolute under the host's $HOME, never a literal
	// "~" (a pasted TORCHELASTIC_ERROR_FILE='~/...' is never expanded).
	wd := filepath.Join(home, "drover", "my job")
	assert.Equal(t, wd+"\n"+filepath.Join(wd, "ck pt")+"\n"+
		filepath.Join(wd, ".drover", "errors", "attempt-0", "worker-0.json")+"\n"+
		filepath.Join(wd, ".drover", "progress", "worker-0")+"\n", string(out))
}

func TestRenderSecrets(t *testing.T) {
	c := testConfig(config.PyTorch, gpuHost("a", "10.0.0.1", 0))
	c.Job.Env = map[string]string{
		"HF_TOKEN": "tok-1", "aws_secret_access_key": "sec-2", "DB_PASSWORD": "pw-3",
		"WANDB_API_KEY": "key-4", "MYSQL_PASSWD": "pw-5", "PLAIN": "visible-6", "KEYBOARD": "visible-7",
	}
	p := mustBuild(t, PlanInput{Config: c})
	secrets := []string{"tok-1", "sec-2", "pw-3", "key-4", "pw-5"}
	for _, f := range Formats() {
		t.Run(string(f), func(t *testing.T) {
			var masked, shown bytes.Buffer
			require.NoError(t, Render(&masked, p, f, RenderOptions{}))
			require.NoError(t, Render(&shown, p, f, RenderOptions{ShowSecrets: true}))
			for _, s := range secrets {
				assert.NotContains(t, masked.String(), s)
				assert.Contains(t, shown.String(), s)
			}
			assert.Contains(t, masked.String(), SecretMask)
			assert.NotContains(t, shown.String(), SecretMask)
			assert.Contains(t, masked.String(), "visible-6")
			assert.Contains(t, masked.String(), "visible-7")
		})
	}
	// The plan itself is never masked: the supervisor starts it.
	assert.Equal(t, "tok-1", p.Processes[0].Env["HF_TOKEN"])
}

func TestIsSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"HF_TOKEN": true, "GITHUB_TOKEN_X": true, "token": true, "MY_SECRET": true, "Password": true,
		"SSH_KEY": true, "aws_access_key": true, "DB_PASSWD": true,
		"KEYS": false, "KEY_ID": false, "MONKEY": false, "PATH": false, "TF_CONFIG": false, "": false,
	} {
		assert.Equal(t, want, IsSecretName(name), name)
	}
}

func TestRenderJSONShape(t *testing.T) {
	p := goldenPlans(t)["tensorflow"]
	var buf bytes.Buffer
	require.NoError(t, RenderJSON(&buf, p, RenderOptions{}))
	var doc struct {
		Job       string `json:"job"`
		Framework string `json:"framework"`
		Processes []struct {
			Host, Address, Role, Workdir string
			Index, Rank, Port            int
			LocalRank                    int `json:"local_rank"`
			GPUs                         []int
			Env                          map[string]string
			Command                      []string
		} `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	assert.Equal(t, "tf-ps", doc.Job)
	assert.Equal(t, "tensorflow", doc.Framework)
	require.Len(t, doc.Processes, 4)
	ps := doc.Processes[3]
	assert.Equal(t, "ps", ps.Role)
	assert.Equal(t, "gpu-b", ps.Host)
	assert.Equal(t, "10.0.0.12", ps.Address)
	assert.Equal(t, 2223, ps.Port)
	assert.Equal(t, -1, ps.Rank)
	assert.NotNil(t, ps.GPUs, "gpus is [] not null")
	assert.Empty(t, ps.GPUs)
	assert.Equal(t, "", ps.Env["CUDA_VISIBLE_DEVICES"])
	assert.Equal(t, p.Processes[3].Env["TF_CONFIG"], ps.Env["TF_CONFIG"])
	assert.Equal(t, []string{"python3", "train.py"}, ps.Command)
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats() {
		got, err := ParseFormat(string(f))
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	_, err := ParseFormat("yaml")
	assert.ErrorContains(t, err, "table, env or json")
}

// TestRenderEnvControlCharacters: a [job.env] value holding an escape
// sequence (a screen clear, a bell, a C1 CSI) reaches the process byte for
// byte through a real sh, yet the rendered text, env and table alike,
// holds no control character that would drive the terminal showing it.
func TestRenderEnvControlCharacters(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	values := map[string]string{"CLEAR": "a\x1b[2J\nb's \\0101 c\n\n", "BELL": "\a", "CSI": "x\u009b31my", "DEL": "\x7f", "PLAIN": "ok"}
	c := testConfig(config.PyTorch, localHost("l0", dir))
	c.Job.Env = values
	c.Job.Command = []string{"sh", "-c", "env -0 > env.bin"}
	p := mustBuild(t, PlanInput{Config: c})

	var buf bytes.Buffer
	require.NoError(t, RenderEnv(&buf, p, RenderOptions{ShowSecrets: true}))
	assert.False(t, strings.ContainsFunc(buf.String(), isControl), "no control character in:\n%s", buf.String())
	cmd := exec.Command(sh, "-c", buf.String())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", out, buf.String())
	envb, err := os.ReadFile(filepath.Join(dir, "env.bin"))
	require.NoError(t, err)
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(envb), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, want := range values {
		assert.Equal(t, []byte(want), []byte(got[k]), "%s", k)
	}

	buf.Reset()
	require.NoError(t, RenderTable(&buf, p, RenderOptions{ShowSecrets: true}))
	assert.False(t, strings.ContainsFunc(buf.String(), isControl), "no control character in:\n%s", buf.String())
	assert.Contains(t, buf.String(), `CLEAR='a\x1b[2J`)
}
