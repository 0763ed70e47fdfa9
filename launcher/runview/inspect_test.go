package runview

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/launcher/agent"
)

// A record that is not final with its supervisor gone is a detached
// run's group running on (unsupervised), or a foreground run's that its
// agents stop (lost); a final record or a live supervisor is shown as
// recorded.
func TestSeenState(t *testing.T) {
	for _, tc := range []struct {
		recorded               agent.RunState
		supervised, foreground bool
		want                   agent.RunState
	}{
		{agent.RunRunning, true, false, agent.RunRunning},
		{agent.RunRunning, true, true, agent.RunRunning},
		{agent.RunRunning, false, false, agent.RunUnsupervised},
		{agent.RunRestarting, false, true, agent.RunLost},
		{agent.RunStarting, false, true, agent.RunLost},
		{agent.RunStopped, false, true, agent.RunStopped},
		{agent.RunSucceeded, false, false, agent.RunSucceeded},
		{agent.RunFailed, true, true, agent.RunFailed},
		// A queued run has no group: with its supervisor gone, its
		// place in the queues is gone too.
		{agent.RunQueued, true, false, agent.RunQueued},
		{agent.RunQueued, false, false, agent.RunLost},
	} {
		assert.Equal(t, tc.want, seenState(tc.recorded, tc.supervised, tc.foreground), "%+v", tc)
	}
}
