// Command drover-nvml is the NVML reader that drover's static agents carry
// (see package launcher/agent): it loads libnvidia-ml.so.1 (package
// gpu/dlnvml, which makes it a dynamically linked program) and prints this
// host's GPU report as JSON, like `drover agent probe --json`. It is not
// meant to be run by people; scripts/build-agent builds it and appends it
// to each agent.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/gpu/dlnvml"
)

func main() {
	// --xid-wait=D also waits D for Xid events (a health poll); older
	// agents pass no argument.
	xidWait := flag.Duration("xid-wait", 0, "wait this long for Xid events")
	flag.Parse()
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	rep := gpu.LocalProber{NVML: dlnvml.Open(), XIDWait: *xidWait}.Probe(host)
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "drover-nvml:", err)
		os.Exit(1)
	}
}
