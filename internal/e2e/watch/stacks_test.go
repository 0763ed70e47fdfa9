package watch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/runview"
)

// stuckTrainer steps with gloo all_reduce on every rank; after 8 s rank 4
// stops in stuck_in_data_loader(), and the others wait for it in
// all_reduce. Rank 0 runs a stand-in for NCCL's RAS service at the
// NCCL_RAS_ADDR drover gave it: NCCL runs its RAS as a thread in each of
// its processes, so does the stand-in; it answers NCCL's client protocol
// (and nothing else) with a report that names rank 4.
const stuckTrainer = `import os, socket, threading, time
import torch
import torch.distributed as dist

RAS_REPORT = b"""Job summary
===========

Errors
======

#0-0 (9e1f0c2a) MISMATCH
  Rank 4 has not launched operation 81 that 5 ranks wait in

Warnings
========
"""


def serve_ras(addr):
    host, port = addr.rsplit(":", 1)
    srv = socket.create_server((host, int(port)))

    def serve():
        while True:
            c, _ = srv.accept()
            with c, c.makefile("rwb") as f:
                if f.readline() != b"CLIENT PROTOCOL 2\n":
                    continue
                f.write(b"SERVER PROTOCOL 2\n")
                f.flush()
                if not f.readline().startswith(b"TIMEOUT "):
                    continue
                f.write(b"OK\n")
                f.flush()
                if f.readline() == b"STATUS\n":
                    f.write(RAS_REPORT)

    threading.Thread(target=serve, daemon=True).start()


def stuck_in_data_loader():
    # What PyTorch's flight recorder writes when NCCL's watchdog fires.
    with open(os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + "4", "wb") as f:
        f.write(b"flight recorder of rank 4")
    while True:
        time.sleep(0.1)


def main():
    if os.environ["RANK"] == "0" and os.environ.get("NCCL_RAS_ADDR"):
        serve_ras(os.environ["NCCL_RAS_ADDR"])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    start, step = time.time(), 0
    while True:
        if rank == 4 and time.time() - start > 8:
            stuck_in_data_loader()
        dist.all_reduce(t)
        step += 1
        if step % 10 == 0:
            print("step", step, flush=True)
        time.sleep(0.1)


main()
`

// Issue 40, items 1 and 2: on a detached run of 3 hosts x 2 ranks
// (/usr/bin/python3, gloo over CPU, no py-spy: drover's own hook), `drover
// stacks` from another directory shows every rank's stack, rank 4's in
// stuck_in_data_loader and the five others' in all_reduce, and all six
// still run afterwards; when hang_timeout fires, the hang's event names
// rank 4 as the one not in the collective, and quotes the errors of the
// (stand-in) NCCL RAS service that the agent on rank 0's host asked, whose
// whole answer the attempt's log directory keeps; the dump rank 4 wrote
// where PyTorch's flight recorder would is copied there too. The job declares that it
// uses NCCL's RAS ([job.env] NCCL_RAS_ENABLE, the way a job on hosts
// without GPUs gets NCCL_RAS_ADDR from drover); gloo ignores it.
func TestStacksOfStuckRank(t *testing.T) {
	fleettest.Need(t, fleet)
	out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput()
	testenv.Need(t, "/usr/bin/python3 with torch (python3-torch)", errIf(err, out))
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 3, Command: `["/usr/bin/python3", "train.py"]`,
		Job: "procs_per_host = 2\nmax_restarts = 0\nhang_timeout = \"40s\"\n\n[job.env]\nNCCL_RAS_ENABLE = \"1\""})
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir, "code", "train.py"), []byte(stuckTrainer), 0o644))
	kit.StartDetachedRun(t, j)
	kit.WaitStatus(t, j, 120*time.Second, "6 running", func(st runview.RunStatus) bool { return kit.Running(st) == 6 })

	// A signal during init_process_group can fail torch's TCPStore
	// connect (EINTR): people ask a training loop, so does the test.
	testenv.Wait(t, 120*time.Second, "every rank to step", func() (bool, string) {
		o, errs, _ := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "logs", j.Path)
		return strings.Count(o, "] step 10\n") == 6, o + errs
	})
	// Until rank 4 is stuck, its stack may show a step.
	stuck := regexp.MustCompile(`(?m)^=== rank 4: worker-4@(\S+) \(pid \d+, faulthandler\): stuck_in_data_loader \(train\.py:\d+\)$`)
	var text string
	testenv.Wait(t, 120*time.Second, "drover stacks to show rank 4 in stuck_in_data_loader", func() (bool, string) {
		o, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stacks", j.Path)
		text = o
		return code == 0 && stuck.MatchString(o) && strings.Count(o, "waits in all_reduce") == 5, fmt.Sprintf("exit %d\n%s\n%s", code, o, errs)
	})
	for r := range 6 {
		assert.Regexp(t, fmt.Sprintf(`(?m)^=== rank %d: worker-%d@\S+ \(pid \d+, faulthandler\): `, r, r), text)
	}
	assert.Contains(t, text, `in stuck_in_data_loader`, "rank 4's frames")
	assert.Regexp(t, `verdict: rank 4 \(worker-4@\S+\) is not in the collective: stuck_in_data_loader \(train\.py:\d+\); ranks 0-3, 5 wait in all_reduce`, text)
	st := kit.Status(t, j)
	assert.Equal(t, 6, kit.Running(st), "every rank still runs after drover stacks: %+v", st)

	one, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stacks", j.Path, "--rank", "4")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, 1, strings.Count(one, "=== rank"), one)

	host := stuck.FindStringSubmatch(text)[1]
	testenv.Wait(t, 120*time.Second, "the hang's event", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*", "events.log"))
		if len(m) != 1 {
			return false, fmt.Sprint(m)
		}
		ev, _ := os.ReadFile(m[0])
		want := "rank 4 (worker-4@" + host + ") is not in the collective: stuck_in_data_loader (train.py:"
		return strings.Contains(string(ev), "group hung") && strings.Contains(string(ev), want) &&
			strings.Contains(string(ev), "ranks 0-3, 5 wait in all_reduce") &&
			strings.Contains(string(ev), "NCCL RAS on "+fleet.Hosts[0].Name+": #0-0 (9e1f0c2a) MISMATCH / Rank 4 has not launched operation 81 that 5 ranks wait in (all of it in "), string(ev)
	})
	kept, err := filepath.Glob(filepath.Join(j.LogRoot, j.Name+"-*", "attempt-1", "nccl-ras.txt"))
	require.NoError(t, err)
	require.Len(t, kept, 1, "NCCL's whole answer is kept")
	whole, err := os.ReadFile(kept[0])
	require.NoError(t, err)
	assert.Contains(t, string(whole), "Job summary\n===========\n\nErrors\n======\n\n#0-0 (9e1f0c2a) MISMATCH\n")
	dump := filepath.Join(filepath.Dir(kept[0]), "flight-recorder", "rank-4")
	testenv.Wait(t, 60*time.Second, "rank 4's flight recorder dump on the controller", func() (bool, string) {
		data, err := os.ReadFile(dump)
		return string(data) == "flight recorder of rank 4", fmt.Sprint(err)
	})
}

// errIf is err with out, nil when err is.
func errIf(err error, out []byte) error {
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// A foreground run's stacks, from another directory: its agents keep
// pidfiles, not a detached run's records. Stdlib Python only, to stay
// cheap.
func TestStacksForegroundRun(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Hosts: 2, Job: "max_restarts = 0",
		Command: `["/usr/bin/python3", "-c", "import time\ndef waiting_here():\n    print('up', flush=True)\n    time.sleep(600)\nwaiting_here()"]`})
	d := kit.StartDrover(t, j)
	d.WaitLines(t, regexp.MustCompile(`(?m)\] up$`), 2, 60*time.Second)
	out, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stacks", j.Path)
	require.Equal(t, 0, code, "%s\n%s", out, errs)
	for r := range 2 {
		assert.Regexp(t, fmt.Sprintf(`(?m)^=== rank %d: worker-%d@\S+ \(pid \d+, faulthandler\): waiting_here \(<string>:4\)$`, r, r), out)
	}
	one, errs, code := kit.DroverIn(t, j, t.TempDir(), 60*time.Second, "stacks", j.Path, "--host", fleet.Hosts[1].Name)
	require.Equal(t, 0, code, errs)
	assert.Equal(t, 1, strings.Count(one, "=== rank 1: worker-1@"+fleet.Hosts[1].Name), one)
	assert.NotContains(t, d.Stdout.String(), "exited", "drover stacks stopped nothing")
	d.Signal(t, syscall.SIGINT)
	assert.Equal(t, 130, d.Wait(t, 60*time.Second))
}
