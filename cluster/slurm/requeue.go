package slurm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A requeued Slurm job runs its batch script again, and drover with it,
// from its first attempt: SLURM_RESTART_COUNT says how often that
// happened, not how many restarts drover made in the allocations before.
// Taking SLURM_RESTART_COUNT as the start would hand out the same
// DROVER_RESTART_COUNT twice (restarts 0, 1, 2, then 1, 2 after one
// requeue), so drover keeps the last count it used for the job beside the
// workdir's other state and continues from there.

// restartDir is where the counts are kept, under the workdir.
const restartDir = ".drover/slurm"

// FirstRestart is the restart count of a run's first attempt in an
// allocation: one more than the last count drover used for this Slurm job
// (when known), and never less than SLURM_RESTART_COUNT (requeues), which
// is all there is to go on when the state was lost.
func FirstRestart(last int, known bool, requeues int) int {
	if known && last+1 > requeues {
		return last + 1
	}
	return requeues
}

// restartFile is the state file of job jobID under workdir.
func restartFile(workdir, jobID string) (string, error) {
	if jobID == "" || strings.ContainsAny(jobID, `/\`) || jobID == "." || jobID == ".." {
		return "", fmt.Errorf("Slurm job id %q cannot name a file", jobID)
	}
	return filepath.Join(workdir, restartDir, jobID+".restart"), nil
}

// LoadRestart reads the last restart count drover used for Slurm job jobID
// with this workdir; known is false when none was saved (the job's first
// run, or a workdir that is not the one the last run saw).
func LoadRestart(workdir, jobID string) (last int, known bool, err error) {
	name, err := restartFile(workdir, jobID)
	if err != nil {
		return 0, false, err
	}
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read drover's restart count for Slurm job %s: %w", jobID, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("read drover's restart count for Slurm job %s: %s holds %q, not a count (remove it to start from SLURM_RESTART_COUNT)", jobID, name, b)
	}
	return n, true, nil
}

// SaveRestart records n as the last restart count drover used for Slurm
// job jobID, replacing the file atomically so that a drover killed
// meanwhile (scancel, a requeue) leaves the old count or the new one.
func SaveRestart(workdir, jobID string, n int) error {
	name, err := restartFile(workdir, jobID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("save drover's restart count for Slurm job %s: %w", jobID, err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), jobID+".restart-*")
	if err != nil {
		return fmt.Errorf("save drover's restart count for Slurm job %s: %w", jobID, err)
	}
	_, werr := fmt.Fprintf(f, "%d\n", n)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("save drover's restart count for Slurm job %s in %s: %w", jobID, f.Name(), err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("save drover's restart count for Slurm job %s: %w", jobID, err)
	}
	return nil
}
