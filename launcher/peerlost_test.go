package launcher

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failure that reads as a lost peer waits for the exit that explains
// it, which is then the root cause, whichever drover heard of first: in a
// DDP desync the rank that finished early closes its sockets while it
// tears down, and its peers' failures may arrive before its exit 0. Rank
// 3 fails on the closed connection first; rank 1, which "closed" it, ends
// only after that. Without the hold, drover stopped the group on rank 3's
// failure (rank 1 then died of the stop) and named rank 3 the root cause.
func TestRunLocalPeerLostWaitsForItsCause(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover and runs processes")
	}
	bin := buildDrover(t)
	const peer = `echo "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500" >&2`
	for _, tc := range []struct {
		name, rank1 string
		settle      time.Duration
		// cause is the summary's root cause, victim what follows it.
		cause, victim, err string
	}{
		{"an early finish explains it", `exit 0`, time.Minute,
			"root cause: worker-1 on a: worker-1@a finished while 3 other(s) still run: the attempt's first event\n",
			"then: worker-3 on b: stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500\n",
			"worker-3@b exited 1: stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500; the attempt's first event: worker-1@a finished while 3 other(s) still run"},
		{"a failure of its own explains it", `echo "RuntimeError: CUDA out of memory" >&2; exit 1`, time.Minute,
			"root cause: worker-1 on a: stderr: RuntimeError: CUDA out of memory\n",
			"then: worker-3 on b: stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer",
			"worker-1@a exited 1: stderr: RuntimeError: CUDA out of memory"},
		{"nothing explains it", `exec sleep 1000`, 300 * time.Millisecond,
			"root cause: worker-3 on b: stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer",
			"", "worker-3@b exited 1: stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marks := t.TempDir()
			// Rank 1 ends only once rank 3 has failed.
			script := `case "$RANK" in
3) ` + peer + `; touch "$MARKS/3"; exit 1;;
1) while [ ! -e "$MARKS/3" ]; do sleep 0.05; done; sleep 0.2; ` + tc.rank1 + `;;
esac
exec sleep 1000`
			job := localJob(t, script, "max_restarts = 0\nprocs_per_host = 2\nmaster_port = 29687\n")
			var out, events bytes.Buffer
			res, err := Run(context.Background(), RunOptions{JobPath: job, AgentBinary: bin, Out: &out, Events: &events,
				Env: map[string]string{"MARKS": marks}, peerLostSettle: tc.settle})
			require.NoError(t, err, "events:\n%s", events.String())
			require.Equal(t, Failed, res.Outcome, "events:\n%s", events.String())
			assert.Contains(t, res.Err.Error(), tc.err)
			assert.Contains(t, events.String(), "a peer went away first: waiting up to "+tc.settle.String()+" to hear which")
			var sum bytes.Buffer
			RenderSummary(&sum, res)
			assert.Contains(t, sum.String(), tc.cause)
			assert.Contains(t, sum.String(), tc.victim)
		})
	}
}
