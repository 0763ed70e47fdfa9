package runview

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

// A host's agent that answers `drover agent runs` (status, logs, stop,
// ps), `drover agent since` or the adoption's look at the run record
// without end costs drover the answer's bound, not its memory: the
// command is stopped there and the error says the host printed too much.
func TestAgentAnswersBounded(t *testing.T) {
	dir := t.TempDir()
	endless := filepath.Join(dir, "drover")
	require.NoError(t, os.WriteFile(endless, []byte("#!/bin/sh\nprintf '\\033[2J'; exec yes '{\"runs\": ['\n"), 0o755))
	local, err := cluster.NewLocal(cluster.Endpoint{Name: "h0", Transport: cluster.TransportLocal})
	require.NoError(t, err)
	defer local.Close()
	v := &hostio.View{Conn: hostio.Conn{Host: config.Host{Name: "h0"}, T: local, AgentPath: endless}, Workdir: dir}
	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"runs", func() error { _, err := v.Runs(context.Background()); return err }},
		{"since", func() error {
			_, err := sinceOffsets(context.Background(), v, []*logSource{{file: "w.log"}}, Since{Ago: time.Minute})
			return err
		}},
		{"run record", func() error {
			_, _, err := remote.Read(context.Background(), local, []string{endless}, "cat run.json", remote.RunRecordLimit)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			done := make(chan error, 1)
			go func() { done <- tc.read() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the endless answer was read for a minute")
			}
			runtime.ReadMemStats(&after)
			var tooMuch *cluster.TooMuchOutputError
			require.ErrorAs(t, err, &tooMuch)
			assert.Equal(t, "h0", tooMuch.Host)
			assert.NotContains(t, err.Error(), "\x1b", "the host's bytes reach the error escaped")
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8*remote.RunRecordLimit), "the answer was read to its bound only (and its buffer grown by doubling)")
		})
	}
}
