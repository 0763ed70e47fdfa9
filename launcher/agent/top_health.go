package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/droverhq/drover/gpu"
)

// TopFinding is one GPU health finding as `drover top` shows it (see
// gpu.CheckHealth).
type TopFinding struct {
	Critical bool   `json:"critical"`
	What     string `json:"what"`
}

// healthFresh is how old the health watch's file may be and still count:
// a few of its reads (DefaultHealthEvery); an older one is a run that
// ended.
const healthFresh = 10 * time.Second

// addHealth attaches the findings of the health watch's newest report to
// s: while a job runs, its agent reads every GPU's health counters (ECC,
// retired pages, row remapping, lost GPUs, throttling, PCIe link) into
// <workdir>/.drover/logs/attempt-N/health.json, and top shows what that
// read found rather than read the counters again. Xids are left to the
// run, which judges each once; here they would be flags for ever.
func (t *topper) addHealth(s *TopSample) {
	if t.workdir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(t.workdir, ".drover", "logs", "attempt-*", "health.json"))
	var newest string
	var at time.Time
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(at) {
			newest, at = f, st.ModTime()
		}
	}
	if newest == "" || s.Time.Sub(at) > healthFresh {
		return
	}
	b, err := os.ReadFile(newest)
	if err != nil {
		return
	}
	var rep gpu.HostReport
	if json.Unmarshal(b, &rep) != nil {
		return
	}
	rep.XIDs = nil
	for _, f := range gpu.CheckHealth(rep, gpu.HealthPolicy{}) { // no Xids: no policy for them
		tf := TopFinding{Critical: f.Critical, What: f.What}
		idx, err := strconv.Atoi(strings.TrimPrefix(f.GPU, "GPU "))
		placed := false
		for i := range s.GPUs {
			if err == nil && s.GPUs[i].Index == idx {
				s.GPUs[i].Health = append(s.GPUs[i].Health, tf)
				placed = true
			}
		}
		if !placed {
			tf.What = f.GPU + ": " + tf.What
			s.Health = append(s.Health, tf)
		}
	}
}
