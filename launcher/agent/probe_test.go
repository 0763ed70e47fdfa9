package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/gpu"
)

// The agent's probe is what drover parses on every host: it must print a
// well-formed report even without a driver.
func TestWriteProbeJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, WriteProbe(&out, true))
	var rep gpu.HostReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "stdout: %s", out.String())
	host, _ := os.Hostname()
	assert.Equal(t, host, rep.Host)
	assert.NotNil(t, rep.Devices)
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		assert.Equal(t, gpu.SourceNVML, rep.Source, rep.Reason)
		return
	}
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Empty(t, rep.Devices)
	assert.Equal(t, "nvml: libnvidia-ml.so.1 not found: no NVIDIA driver", rep.Reason)
}

func TestWriteProbeTable(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("GPU host: the table depends on the GPUs")
	}
	var out bytes.Buffer
	require.NoError(t, WriteProbe(&out, false))
	host, _ := os.Hostname()
	assert.Equal(t, host+": 0 GPUs (nvml: libnvidia-ml.so.1 not found: no NVIDIA driver)\n", out.String())
}
