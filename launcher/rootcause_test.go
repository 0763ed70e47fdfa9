package launcher

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

func TestParseErrorFile(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"record_exception", `{"message": {"message": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    return f(*args, **kwargs)\n  File \"/home/u/drover/job/train.py\", line 212, in main\n    loss.backward()\nRuntimeError: CUDA out of memory.\n", "timestamp": "1700000000"}}}`,
			"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (train.py:212)", true},
		{"multi-line message", `{"message": {"message": "ValueError: bad\nsecond line", "extraInfo": {"py_callstack": "", "timestamp": "1"}}}`,
			"ValueError: bad", true},
		{"bare string message", `{"message": "SignalException: Process 7 got signal: 15"}`,
			"SignalException: Process 7 got signal: 15", true},
		{"not json", `Traceback`, "", false},
		{"empty message", `{"message": {"message": ""}}`, "", false},
		{"no message", `{}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseErrorFile([]byte(tt.in))
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
	long, ok := parseErrorFile([]byte(`{"message": {"message": "E: ` + strings.Repeat("x", 1000) + `"}}`))
	require.True(t, ok)
	assert.LessOrEqual(t, len(long), maxCause)
	assert.True(t, strings.HasSuffix(long, "..."))
}

func TestStderrCause(t *testing.T) {
	assert.Equal(t, "", stderrCause("\n \n"))
	assert.Equal(t, "stderr: b | c | d", stderrCause("a\nb\n\nc\n  d  \n"))
	assert.Equal(t, "stderr: a", stderrCause("a\ndrover agent: command exited; stopping processes it left in group 7\n"))
}

func TestRootCause(t *testing.T) {
	dir := t.TempDir()
	fsys := cluster.NewOSFS(dir)
	good := filepath.Join(dir, "worker-1.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"message": {"message": "KeyError: 'lr'", "extraInfo": {"py_callstack": "  File \"t.py\", line 3, in f\n"}}}`), 0o644))
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{"), 0o644))
	assert.Equal(t, "KeyError: 'lr' (t.py:3)", rootCause(fsys, good, "boom"))
	assert.Equal(t, "stderr: boom", rootCause(fsys, bad, "boom"), "unreadable error file: stderr")
	assert.Equal(t, "stderr: boom", rootCause(fsys, filepath.Join(dir, "none.json"), "boom"), "no error file: stderr")
	assert.Equal(t, "stderr: boom", rootCause(fsys, "", "boom"))
	assert.Equal(t, "", rootCause(fsys, "", ""))
}

// TestRunLocalRootCause runs a failing job on local hosts with real agents:
// the failure's root cause, from the error file torch's @record writes or
// else from stderr, reaches the result and the summary.
func TestRunLocalRootCause(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	for _, tc := range []struct {
		name, script, want string
	}{
		{"error file", `
if [ "$RANK" = 1 ]; then
	printf '%s' '{"message": {"message": "RuntimeError: boom on rank 1", "extraInfo": {"py_callstack": "  File \"train.py\", line 42, in main\n", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"
	echo "not this" >&2
	exit 1
fi
sleep 1000`, "RuntimeError: boom on rank 1 (train.py:42)"},
		{"stderr", `
if [ "$RANK" = 1 ]; then
	echo "loading data" >&2; echo "FileNotFoundError: data/x.bin" >&2; exit 2
fi
sleep 1000`, "stderr: loading data | FileNotFoundError: data/x.bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := localJob(t, tc.script, "max_restarts = 0\nmaster_port = 29651\n")
			var out, events bytes.Buffer
			res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events})
			require.NoError(t, err, "events:\n%s", events.String())
			require.Equal(t, Failed, res.Outcome, "events:\n%s", events.String())
			assert.Contains(t, res.Err.Error(), "worker-1@b exited")
			assert.Contains(t, res.Err.Error(), tc.want)
			assert.Contains(t, events.String(), tc.want, "the failure event names the cause")
			var sum bytes.Buffer
			RenderSummary(&sum, res)
			assert.Contains(t, sum.String(), "root cause: worker-1 on b: "+tc.want)
			assert.NotContains(t, sum.String(), "worker-0 on a:", "the stopped rank is no root cause")
		})
	}
}

// A torchrun's last stderr lines are the footer of its failure table;
// the cause is the table's root cause: rank, host, exit code, message.
func TestRootCauseFromTorchrunTable(t *testing.T) {
	tail := `[default1]:RuntimeError: Connection closed by peer
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_12:00:01
  host      : gpu-b
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
`
	assert.Equal(t, "torchrun: rank 3 (local_rank: 1) on gpu-b exitcode -9 (pid: 4242): Signal 9 (SIGKILL) received by PID 4242",
		rootCause(nil, "", tail))
	noTrace := strings.Replace(tail, "Signal 9 (SIGKILL) received by PID 4242", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", 1)
	assert.Equal(t, "torchrun: rank 3 (local_rank: 1) on gpu-b exitcode -9 (pid: 4242)", rootCause(nil, "", noTrace))
	assert.Equal(t, "stderr: a | b | c", rootCause(nil, "", "a\nb\nc\n"), "no table: the last stderr lines")
}
