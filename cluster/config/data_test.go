package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadData(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	src := joinParts(jobHead, lns(`data_copy_rate = "100MB/s"`), hostA,
		lns(`[[data]]`, `name = "imagenet"`, `source = "a:/srv/imagenet/"`, `dest = "data/imagenet"`),
		lns(`[[data]]`, `source = "local/tok"`, `dest = "/scratch/tok"`))
	require.NoError(t, os.WriteFile(job, []byte(src), 0o644))
	cfg, err := Load(job, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(100e6), cfg.Job.DataCopyRate)
	assert.Equal(t, []DataSet{
		{Name: "imagenet", SourceHost: "a", Source: "/srv/imagenet", Dest: "data/imagenet", Line: 9},
		{Source: filepath.Join(dir, "local/tok"), Dest: "/scratch/tok", Line: 13},
	}, cfg.Data)
	assert.Equal(t, "DROVER_DATA_IMAGENET", DataNameEnv("imagenet"))
	assert.Equal(t, "DROVER_DATA_1", DataEnvName(1))
}

// TestLoadDataErrors: every mistake in a [[data]] table is refused at
// load, on its line, with a fix.
func TestLoadDataErrors(t *testing.T) {
	data := func(lines ...string) string {
		return joinParts(jobHead, hostA, append([]string{`[[data]]`}, lines...))
	}
	cases := []errorCase{
		{name: "unknown host", job: data(`source = "b:/srv/x"`, `dest = "x"`), line: 9, key: "data[1].source", msg: `names host "b"`, fix: "[[host]]"},
		{name: "no source", job: data(`dest = "x"`), line: 8, key: "data[1].source", msg: "needs source", fix: "source ="},
		{name: "no dest", job: data(`source = "a:/srv/x"`), line: 8, key: "data[1].dest", msg: "needs dest", fix: "dest ="},
		{name: "dest is the workdir", job: data(`source = "a:/srv/x"`, `dest = "./"`), line: 10, key: "data[1].dest", msg: "the workdir itself", fix: "dest ="},
		{name: "dest leaves the workdir", job: data(`source = "a:/srv/x"`, `dest = "../x"`), line: 10, key: "data[1].dest", msg: "outside the workdir", fix: "dest ="},
		{name: "dest under ~", job: data(`source = "a:/srv/x"`, `dest = "~/d"`), line: 10, key: "data[1].dest", msg: "~", fix: "dest ="},
		{name: "dest in .drover", job: data(`source = "a:/srv/x"`, `dest = ".drover/d"`), line: 10, key: "data[1].dest", msg: ".drover", fix: "dest ="},
		{name: "bad name", job: data(`name = "1x"`, `source = "a:/srv/x"`, `dest = "x"`), line: 9, key: "data[1].name", msg: "DROVER_DATA_", fix: "name ="},
		{name: "no path after host", job: data(`source = "a:"`, `dest = "x"`), line: 9, key: "data[1].source", msg: "no usable path", fix: "a:/srv/data"},
		{name: "same dest twice", job: joinParts(jobHead, hostA, lns(`[[data]]`, `source = "a:/x"`, `dest = "d"`, `[[data]]`, `source = "a:/y"`, `dest = "d/"`)),
			line: 13, key: "data[2].dest", msg: "also the dest", fix: "own dest"},
		{name: "same name twice", job: joinParts(jobHead, hostA, lns(`[[data]]`, `name = "a-b"`, `source = "a:/x"`, `dest = "d"`, `[[data]]`, `name = "a_b"`, `source = "a:/y"`, `dest = "e"`)),
			line: 13, key: "data[2].name", msg: "DROVER_DATA_A_B", fix: "own name"},
		{name: "data is one table", job: joinParts(jobHead, hostA, lns(`[data]`, `source = "a:/x"`)), line: 8, key: "data", msg: "[[data]] tables", fix: "double brackets"},
		{name: "unknown key", job: data(`source = "a:/x"`, `dest = "d"`, `dst = "e"`), line: 11, key: "data[1].dst", msg: "unknown key", fix: "dest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			job := filepath.Join(dir, "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(tc.job), 0o644))
			_, err := Load(job, LoadOptions{})
			ces := configErrors(t, err)
			require.Len(t, ces, 1, "want exactly one error, got:\n%v", err)
			e := ces[0]
			assert.Equal(t, tc.line, e.Line, "line of %v", e)
			assert.Equal(t, tc.key, e.Key, "key of %v", e)
			assert.Contains(t, e.Msg, tc.msg, "msg of %v", e)
			assert.Contains(t, e.Fix, tc.fix, "fix of %v", e)
		})
	}
}
