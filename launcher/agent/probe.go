package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/droverhq/drover/gpu"
)

// ProbeCommand returns the argv of `drover agent probe --json`, which
// prints this host's GPUs as read over NVML (see WriteProbe).
func ProbeCommand(binary string) []string {
	return []string{binary, cmdAgent, cmdProbe, "--" + flagJSON}
}

// WriteProbe reads this host's GPUs over NVML and writes the report to w:
// the JSON drover's probe, plan and run consume, or a table. NVML only
// answers on the machine with the GPUs, so drover runs this there. A host
// without a driver gets zero devices and the reason, not an error: having
// no GPUs is a fact to report, not a failure of the probe.
func WriteProbe(w io.Writer, asJSON bool) error {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	rep := probeLocal(host)
	if !asJSON {
		return gpu.RenderTable(w, []gpu.HostResult{{Report: rep}})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("agent probe: write report: %w", err)
	}
	return nil
}
