package launcher

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

// The summary gives causes in the order drover saw them, whatever the
// plan order: the first is the root cause, the victims follow as "then:".
func TestWriteCausesOrderedByDroversClock(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	writeCauses(&b, []ProcSummary{
		{Name: "worker-0", Host: "a", Cause: "stderr: Connection closed by peer", CauseAt: t0.Add(300 * time.Millisecond)},
		{Name: "worker-1", Host: "a"},
		{Name: "worker-2", Host: "b", Cause: "worker-2@b finished while 3 other(s) still run: the attempt's first event", CauseAt: t0},
		{Name: "worker-3", Host: "b", Cause: "stderr: Connection reset", CauseAt: t0.Add(time.Second)},
	})
	assert.Equal(t, "root cause: worker-2 on b: worker-2@b finished while 3 other(s) still run: the attempt's first event\n"+
		"then: worker-0 on a: stderr: Connection closed by peer\n"+
		"then: worker-3 on b: stderr: Connection reset\n", b.String())
}

// workerLines hands the agent's worker reports to the supervisor as whole
// lines arrive, however the stream is cut, and ignores every other line.
func TestWorkerLinesParsesReportsAcrossWrites(t *testing.T) {
	out := make(chan workerMsg, 4)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w := &workerLines{rp: &running{}, out: out, now: func() time.Time { return at }}
	report := agent.WorkerExit{Rank: 3, LocalRank: 1, Pid: 42, Status: 137, Signal: "KILL", Running: 1}.Line()
	stream := "[default1]:Traceback (most recent call last):\n" + report + "\ntail without newline"
	for len(stream) > 0 { // seven bytes at a time
		n := min(7, len(stream))
		_, err := w.Write([]byte(stream[:n]))
		require.NoError(t, err)
		stream = stream[n:]
	}
	require.Len(t, out, 1)
	m := <-out
	assert.Equal(t, 3, m.w.Rank)
	assert.Equal(t, "KILL", m.w.Signal)
	assert.Equal(t, at, m.at)
	assert.True(t, strings.HasPrefix(report, agent.MessagePrefix+"worker rank 3 (local rank 1, pid 42) killed by SIGKILL (137); report {"), report)
}

// The preflight, whose environment rides on the login shell's command
// line, gets PATH alone: no [job.env] token ever appears on a command line.
func TestPreflightEnvIsPathOnly(t *testing.T) {
	assert.Equal(t, map[string]string{"PATH": "/opt/py/bin:/usr/bin"},
		preflightEnv(map[string]string{"PATH": "/opt/py/bin:/usr/bin", "HF_TOKEN": "tok-1", "RANK": "3"}))
	assert.Nil(t, preflightEnv(map[string]string{"HF_TOKEN": "tok-1"}))
}
