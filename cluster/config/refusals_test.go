package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/ignore"
)

// refusalCases are checkpoint settings that can only go wrong (issue 30
// item 8), each refused at load with one error on its line; accepted
// cases (want "") are their neighbours that must still load.
var refusalCases = []struct {
	name  string
	lines []string          // after jobHead, before hostA
	files map[string]string // beside job.toml; "d/" makes a directory
	line  int
	want  string // "" = loads
}{
	{name: "checkpoint_dir is .drover", lines: lns(`checkpoint_dir = ".drover"`), line: 5},
	{name: "checkpoint_dir inside .drover", lines: lns(`checkpoint_dir = ".drover/checkpoints"`), line: 5},
	{name: "checkpoint_dir .drover spelled long", lines: lns(`checkpoint_dir = "./ckpt/../.drover/x/.."`), line: 5},
	{name: "checkpoint_dir inside an absolute workdir's .drover", lines: lns(`workdir = "/srv/run/j"`, `checkpoint_dir = "/srv/run/j/.drover/checkpoints"`), line: 6},
	{name: "checkpoint_dir outside the home", lines: lns(`checkpoint_dir = "../../../data"`), line: 5},
	{name: "checkpoint_dir outside the home from a ~ workdir", lines: lns(`workdir = "~/runs/j"`, `checkpoint_dir = "../../../x/ckpt"`), line: 6},
	{name: "checkpoint_dir named like .drover", lines: lns(`checkpoint_dir = ".droverx"`), want: ""},
	{name: "checkpoint_dir elsewhere in the home", lines: lns(`checkpoint_dir = "../../data/ckpt"`), want: ""},
	{name: "checkpoint_dir absolute outside the home", lines: lns(`checkpoint_dir = "/data/ckpt"`), want: ""},
	{name: "checkpoint_mirror is the root", lines: lns(`checkpoint_mirror = "/"`), line: 5},
	{name: "checkpoint_mirror is . (the code directory)", lines: lns(`checkpoint_mirror = "."`), line: 5},
	{name: "checkpoint_mirror is the code directory", lines: lns(`code = "src"`, `checkpoint_mirror = "src/"`), files: map[string]string{"src/": ""}, line: 6},
	{name: "checkpoint_mirror is . beside a code directory", lines: lns(`code = "src"`, `checkpoint_mirror = "."`), files: map[string]string{"src/": ""}, line: 6},
	{name: "checkpoint_mirror is the log directory", lines: lns(`checkpoint_mirror = "runs"`), line: 5},
	{name: "checkpoint_mirror inside the code directory", lines: lns(`checkpoint_mirror = "ckpt/mirror"`), line: 5},
	{name: "checkpoint_mirror excluded, then included again", lines: lns(`checkpoint_mirror = "mirror"`, `exclude = ["!mirror/"]`), files: map[string]string{ignore.File: "mirror*/\n"}, line: 5},
	{name: "checkpoint_mirror inside an excluded directory", lines: lns(`checkpoint_mirror = "ckpt/mirror"`, `exclude = ["ckpt/", "!ckpt/mirror"]`), want: ""},
	{name: "checkpoint_mirror excluded by job.exclude", lines: lns(`checkpoint_mirror = "ckpt/mirror"`, `exclude = ["ckpt/"]`), want: ""},
	{name: "checkpoint_mirror excluded by .droverignore", lines: lns(`checkpoint_mirror = "mirror"`), files: map[string]string{ignore.File: "/mirror/\n"}, want: ""},
	{name: "checkpoint_mirror in the log directory", lines: lns(`checkpoint_mirror = "runs/mirror"`), want: ""},
	{name: "checkpoint_mirror beside the code", lines: lns(`checkpoint_mirror = "../j-mirror"`), want: ""},
}

// TestLoadRefusesCheckpointPlaces: each case's error (file:line, what,
// fix) against testdata/config/refusals.golden, with the test's temporary
// directory shown as $DIR and its parent as $TMP; go test -run TestLoadRefusesCheckpointPlaces
// -update ./cluster/config rewrites it.
func TestLoadRefusesCheckpointPlaces(t *testing.T) {
	var got strings.Builder
	for _, tc := range refusalCases {
		dir := t.TempDir()
		for name, body := range tc.files {
			if d, ok := strings.CutSuffix(name, "/"); ok {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
				continue
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
		}
		job := filepath.Join(dir, "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, tc.lines, hostA)), 0o644))
		cfg, err := Load(job, LoadOptions{})
		if tc.line == 0 {
			assert.NoError(t, err, tc.name)
			assert.NotNil(t, cfg, tc.name)
			continue
		}
		ces := configErrors(t, err)
		require.Len(t, ces, 1, "%s: want one error, got:\n%v", tc.name, err)
		assert.Equal(t, tc.line, ces[0].Line, "%s: %v", tc.name, ces[0])
		assert.NotEmpty(t, ces[0].Fix, tc.name)
		fmt.Fprintf(&got, "# %s\n%s\n\n", tc.name, strings.NewReplacer(dir, "$DIR", filepath.Dir(dir), "$TMP").Replace(err.Error()))
	}
	golden := filepath.Join("testdata", "config", "refusals.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, []byte(got.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run TestLoadRefusesCheckpointPlaces -update ./cluster/config to create it")
	assert.Equal(t, string(want), got.String())
}
