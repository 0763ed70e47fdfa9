package hostio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/droverhq/drover/launcher/agent"
)

// localRunsDir is where this machine keeps one file per detached run it
// started or adopted (PsRow), under the user's home, for `drover ps`.
const localRunsDir = ".drover/supervised"

// PsRow is one run in `drover ps`; --json prints these.
type PsRow struct {
	RunID   string         `json:"run_id"`
	Job     string         `json:"job"`
	State   agent.RunState `json:"state"`
	Attempt int            `json:"attempt"`
	Hosts   []string       `json:"hosts"`
	// JobFile and Supervisor are known for runs this machine supervised.
	JobFile    string    `json:"job_file,omitempty"`
	Supervisor int       `json:"supervisor_pid,omitempty"`
	Updated    time.Time `json:"updated"`
}

// NoteLocally records rec, a run of the job file jobPath, in this
// machine's list of supervised runs; a run id that is not drover's
// (agent.CheckRunID) names no file here.
func NoteLocally(jobPath string, rec agent.RunRecord) {
	home, err := os.UserHomeDir()
	if err != nil || agent.CheckRunID(rec.RunID) != nil {
		return
	}
	abs, _ := filepath.Abs(jobPath)
	row := PsRow{RunID: rec.RunID, Job: rec.Job, State: rec.State, Attempt: rec.Attempt, Hosts: rec.Hosts,
		JobFile: abs, Supervisor: rec.SupervisorPid, Updated: rec.Updated}
	data, _ := json.MarshalIndent(row, "", "  ")
	dir := filepath.Join(home, localRunsDir)
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	tmp := filepath.Join(dir, "."+rec.RunID+".tmp")
	if os.WriteFile(tmp, append(data, '\n'), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, rec.RunID+".json"))
	}
}

// LocalRuns are the detached runs this machine started or adopted, newest
// first (a file whose run id is not drover's, or not its name, is none); one whose supervisor is gone and that is not over reads as
// unsupervised (as far as this machine knows: `drover status` asks the
// hosts).
func LocalRuns() ([]PsRow, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("find the home directory: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(home, localRunsDir, "*.json"))
	rows := []PsRow{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		var row PsRow
		if err != nil || json.Unmarshal(b, &row) != nil || agent.CheckRunID(row.RunID) != nil || filepath.Base(f) != row.RunID+".json" {
			continue // not a row NoteLocally wrote
		}
		if !row.State.Final() && (row.Supervisor <= 0 || syscall.Kill(row.Supervisor, 0) != nil) {
			row.State = agent.RunUnsupervised
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Updated.After(rows[j].Updated) })
	return rows, nil
}
