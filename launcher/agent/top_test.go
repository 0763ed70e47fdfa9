package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nvidia-smi's CSV as an H200 prints it (gpu/testdata/h200), with the
// forms of a value it does not report.
func TestParseTopGPUs(t *testing.T) {
	out := "0, GPU-05955e7c, 87, 70123, 143771, 40, 127.31, 0x0000000000000000, 0\n" +
		"1, GPU-aa, [N/A], 1, 143771, 41, [Not Supported], 0x0000000000000040, 2\n"
	gpus, err := ParseTopGPUs([]byte(out))
	require.NoError(t, err)
	require.Len(t, gpus, 2)
	assert.Equal(t, 87.0, *gpus[0].UtilPct)
	assert.Equal(t, 127.31, *gpus[0].PowerW)
	assert.Equal(t, uint64(0), *gpus[0].Throttle)
	assert.Nil(t, gpus[1].UtilPct)
	assert.Nil(t, gpus[1].PowerW)
	assert.Equal(t, uint64(0x40), *gpus[1].Throttle)
	assert.Equal(t, 2.0, *gpus[1].ECCVolatile)
	_, err = ParseTopGPUs([]byte("0, GPU-x, 1\n"))
	assert.ErrorContains(t, err, "want 9 fields")
}

// A process's pidfile, log and progress file make its row: its state,
// the age of its output and the step with the rate between two.
func TestTopProcs(t *testing.T) {
	wd := t.TempDir()
	for _, d := range []string{"pids", "logs/attempt-1", "progress"} {
		require.NoError(t, os.MkdirAll(filepath.Join(wd, ".drover", d), 0o755))
	}
	pf := Pidfile{ChildPid: os.Getpid(), Pgid: os.Getpid(), Started: time.Now()}
	require.NoError(t, writePidfile(filepath.Join(wd, ".drover/pids/worker-0.pid"), pf))
	logf := filepath.Join(wd, ".drover/logs/attempt-1/worker-0.log")
	require.NoError(t, os.WriteFile(logf, []byte("hi\n"), 0o644))
	require.NoError(t, os.Chtimes(logf, time.Now(), time.Now().Add(-30*time.Second)))
	prog := filepath.Join(wd, ".drover/progress/worker-0")
	t0 := time.Now().Add(-10 * time.Second)
	require.NoError(t, os.WriteFile(prog, []byte("step=100\n"), 0o644))
	require.NoError(t, os.Chtimes(prog, t0, t0))

	tp := &topper{workdir: wd, steps: map[string]stepSeen{}}
	ps := tp.procs(time.Now())
	require.Len(t, ps, 1)
	assert.Equal(t, "worker-0", ps[0].Name)
	assert.Contains(t, []string{"running", "sleeping"}, ps[0].State)
	assert.InDelta(t, 30, ps[0].OutputAgeS, 5)
	assert.Equal(t, int64(100), *ps[0].Step)
	assert.Nil(t, ps[0].StepRate, "one step seen: no rate yet")

	require.NoError(t, os.WriteFile(prog, []byte("loss=0.1 step=150\n"), 0o644))
	require.NoError(t, os.Chtimes(prog, t0.Add(5*time.Second), t0.Add(5*time.Second)))
	ps = tp.procs(time.Now())
	assert.Equal(t, int64(150), *ps[0].Step)
	require.NotNil(t, ps[0].StepRate)
	assert.InDelta(t, 10.0, *ps[0].StepRate, 0.01)

	// A line the process printed after the sample's time was taken (it
	// prints while top reads): its output is 0 s old, not unknown (-1,
	// which top shows as "-"; TestTopOnceJSON met it under load).
	before := time.Now()
	require.NoError(t, os.Chtimes(logf, before.Add(50*time.Millisecond), before.Add(50*time.Millisecond)))
	ps = tp.procs(before)
	assert.Zero(t, ps[0].OutputAgeS)
}

// Without nvidia-smi a sample still comes, saying why it has no GPUs.
func TestTopOnceWithoutSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out bytes.Buffer
	require.NoError(t, Top(context.Background(), TopOptions{Workdir: t.TempDir()}, nil, &out))
	var s TopSample
	require.NoError(t, json.Unmarshal(out.Bytes(), &s))
	assert.Contains(t, s.GPUError, "nvidia-smi")
	assert.Empty(t, s.GPUs)
}

// TestTopRealNvidiaSMI runs only where there is a real NVIDIA driver (CI
// has none; the lead's GPU check runs it): drover top's query must be one
// the real nvidia-smi accepts, in forms ParseTopGPUs reads, with the
// numbers every data-centre GPU reports.
func TestTopRealNvidiaSMI(t *testing.T) {
	// A GPU is hardware, not a package .ci/run can install: this test
	// runs where one is, and skips (CI=true or not) where none is.
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver here (/dev/nvidiactl missing)")
	}
	gpus, err := smiGPUs(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, gpus)
	for _, g := range gpus {
		assert.NotEmpty(t, g.UUID, "GPU %d", g.Index)
		assert.NotNil(t, g.UtilPct, "GPU %d utilization", g.Index)
		assert.NotNil(t, g.MemTotalMiB, "GPU %d memory.total", g.Index)
		assert.NotNil(t, g.TempC, "GPU %d temperature", g.Index)
		assert.NotNil(t, g.PowerW, "GPU %d power.draw", g.Index)
		assert.NotNil(t, g.Throttle, "GPU %d clocks_throttle_reasons.active", g.Index)
		assert.NotNil(t, g.SMClockMHz, "GPU %d clocks.sm", g.Index)
		assert.NotNil(t, g.SMClockMaxMHz, "GPU %d clocks.max.sm", g.Index)
	}
}

// A process's row carries its process group's CPU time (the straggler
// watch's CPU per step): at least what this process, a member, used.
func TestTopProcsCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU time is read from /proc")
	}
	wd := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(wd, ".drover", "pids"), 0o755))
	pf := Pidfile{ChildPid: os.Getpid(), Pgid: syscall.Getpgrp(), Started: time.Now()}
	require.NoError(t, writePidfile(filepath.Join(wd, ".drover/pids/worker-0.pid"), pf))
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	own := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	ps := (&topper{workdir: wd, steps: map[string]stepSeen{}}).procs(time.Now())
	require.Len(t, ps, 1)
	require.NotNil(t, ps[0].CPUSeconds)
	assert.GreaterOrEqual(t, *ps[0].CPUSeconds, own-0.05, "this process's %.2fs (ticks of 10 ms)", own)
}

// A sampler whose controller fell silent (a cut link its sshd has not
// noticed) stops after the heartbeat; one that hears from it goes on. In a
// synctest bubble: the sampler, its stdin (a pipe) and its timers are all
// in this process, so the 1.5 s of heartbeats take no real time.
func TestTopHeartbeat(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	workdir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		stdinR, stdinW := io.Pipe()
		defer stdinW.Close()
		done := make(chan error, 1)
		go func() {
			done <- Top(context.Background(), TopOptions{Workdir: workdir, Every: 50 * time.Millisecond, Heartbeat: time.Second}, stdinR, io.Discard)
		}()
		for range 15 { // 1.5 s of heartbeats: it must still run
			_, err := stdinW.Write([]byte("\n"))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-done:
			t.Fatal("top stopped while its controller wrote heartbeats")
		default:
		}
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("top still samples 30s after its stdin fell silent (heartbeat 1s)")
		}
	})
}
