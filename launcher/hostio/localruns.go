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

// localRunsDir is where this machine keeps one file per run it
// supervised, foreground or detached, started or adopted (PsRow), under
// the user's home, for `drover ps`.
const localRunsDir = ".drover/supervised"

// PsRetention is how long this machine's list keeps a run that is over
// (succeeded, failed, stopped, or a foreground run whose drover is gone)
// after its last change: `drover ps --all` shows it until then, and the
// next `drover ps` after that forgets it. A run that may still be
// running (unsupervised: a detached group outlives its supervisor) is
// kept whatever its age.
const PsRetention = 7 * 24 * time.Hour

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
	// Foreground says a foreground `drover run` supervised it.
	Foreground bool `json:"foreground,omitempty"`
	// file is the row's file in this machine's list.
	file string
}

// Live reports whether the run may still be running: not over, and not a
// foreground run whose supervisor is gone (its agents stop its group).
func (r PsRow) Live() bool {
	return !r.State.Final() && r.State != agent.RunLost
}

// SelectRuns is `drover ps`'s choice among this machine's rows at now:
// the live ones, newest first (all: every row kept), and the rows to
// forget, over for longer than PsRetention.
func SelectRuns(rows []PsRow, now time.Time, all bool) (show, forget []PsRow) {
	show = []PsRow{}
	for _, r := range rows {
		switch {
		case !r.Live() && now.Sub(r.Updated) > PsRetention:
			forget = append(forget, r)
		case all || r.Live():
			show = append(show, r)
		}
	}
	sort.SliceStable(show, func(i, j int) bool { return show[i].Updated.After(show[j].Updated) })
	return show, forget
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
		JobFile: abs, Supervisor: rec.SupervisorPid, Updated: rec.Updated, Foreground: rec.Foreground}
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

// LocalRuns are the runs this machine supervised (started or adopted),
// newest first: the live ones, or with all every one not yet forgotten
// (see SelectRuns; those past PsRetention are removed from the list
// here). A file whose run id is not drover's, or not its name, is none.
// One whose supervisor is gone and that is not over reads as
// unsupervised, or lost for a foreground run (as far as this machine
// knows: `drover status` asks the hosts).
func LocalRuns(all bool) ([]PsRow, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("find the home directory: %w", err)
	}
	dir := filepath.Join(home, localRunsDir)
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	rows := []PsRow{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		var row PsRow
		if err != nil || json.Unmarshal(b, &row) != nil || agent.CheckRunID(row.RunID) != nil || filepath.Base(f) != row.RunID+".json" {
			continue // not a row NoteLocally wrote
		}
		if !row.State.Final() && (row.Supervisor <= 0 || syscall.Kill(row.Supervisor, 0) != nil) {
			// A queued run has no group to run on: its place in the
			// queues went with its supervisor.
			lost := row.Foreground || row.State == agent.RunQueued
			row.State = agent.RunUnsupervised
			if lost {
				row.State = agent.RunLost
			}
		}
		row.file = f
		rows = append(rows, row)
	}
	show, forget := SelectRuns(rows, time.Now(), all)
	for _, r := range forget {
		_ = os.Remove(r.file)
	}
	return show, nil
}

// MarkLocally records, in this machine's list, that run id ended in
// state (`drover stop` of a run whose supervisor was gone), if the list
// has it: a run stopped through its agents is then not listed as live.
func MarkLocally(id string, state agent.RunState) {
	home, err := os.UserHomeDir()
	if err != nil || filepath.Base(id) != id {
		return
	}
	f := filepath.Join(home, localRunsDir, id+".json")
	b, err := os.ReadFile(f)
	var row PsRow
	if err != nil || json.Unmarshal(b, &row) != nil {
		return
	}
	row.State, row.Updated = state, time.Now().UTC()
	data, _ := json.MarshalIndent(row, "", "  ")
	tmp := filepath.Join(filepath.Dir(f), "."+id+".tmp")
	if os.WriteFile(tmp, append(data, '\n'), 0o600) == nil {
		_ = os.Rename(tmp, f)
	}
}
