package gpu

import (
	"context"
	"fmt"
	"time"
)

// Held is a GPU still used by a process of the job after its attempt
// stopped: a process that outlived the stop (a zombie holding the device,
// a child that escaped), which would make the next attempt fail to get
// memory on that GPU.
type Held struct {
	GPU     int
	Process Process
}

func (h Held) String() string { return fmt.Sprintf("GPU %d held by pid %s", h.GPU, h.Process) }

// WaitReleased polls probe until none of gpus runs a process of the job, or
// until limit has passed, and returns what still holds them then (nil when
// they were released). The job's processes are those that were not on the
// GPU before the attempt started (before, by GPU index, from the probe that
// selected the GPUs): a foreign process that was already there is not the
// job's to wait for. A probe that cannot see processes (no NVML, a field
// not supported) ends the wait at once: there is nothing to wait on.
func WaitReleased(ctx context.Context, probe func(context.Context) HostReport, gpus []int,
	before map[int][]int, limit, every time.Duration) []Held {
	deadline := time.Now().Add(limit)
	for {
		held := heldBy(probe(ctx), gpus, before)
		if len(held) == 0 || !time.Now().Before(deadline) {
			return held
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return held
		case <-t.C:
		}
	}
}

// heldBy lists the job's processes on gpus in rep.
func heldBy(rep HostReport, gpus []int, before map[int][]int) []Held {
	var out []Held
	for _, i := range gpus {
		d, ok := rep.Device(i)
		if !ok || !d.Known(FieldProcesses) {
			continue
		}
		for _, p := range d.Processes {
			if !containsInt(before[i], p.PID) {
				out = append(out, Held{GPU: i, Process: p})
			}
		}
	}
	return out
}

// Pids lists, by GPU index, the processes on each GPU of rep: the before
// argument of WaitReleased.
func Pids(rep HostReport) map[int][]int {
	out := map[int][]int{}
	for _, d := range rep.Devices {
		for _, p := range d.Processes {
			out[d.Index] = append(out[d.Index], p.PID)
		}
	}
	return out
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
