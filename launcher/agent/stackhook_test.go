//go:build linux

package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
)

// startHooked starts /usr/bin/python3 -c script with drover's hook on its
// PYTHONPATH (written by writeStacksHook, as the agent does before a
// rank starts), extra (another sitecustomize's directory) after it, and
// waits until it prints "ready".
func startHooked(t *testing.T, dir, extra, script string) *exec.Cmd {
	t.Helper()
	env := map[string]string{StacksDirEnv: dir, "PYTHONPATH": StacksHookDir(dir)}
	if err := writeStacksHook(env); err != nil {
		t.Fatal(err)
	}
	if extra != "" {
		env["PYTHONPATH"] += ":" + extra
	}
	cmd := exec.Command("/usr/bin/python3", "-c", script)
	cmd.Env = append(os.Environ(), StacksDirEnv+"="+dir, "PYTHONPATH="+env["PYTHONPATH"])
	out := &syncBuilder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.WaitFor(t, 20*time.Second, "the python process to say ready", func() bool { return strings.Contains(out.String(), "ready") })
	return cmd
}

// drover's hook dumps every thread of a live process on SIGUSR2 into the
// process's own file, the process goes on, and a second dump reads only
// what the second signal wrote. A sitecustomize the hook hides on
// PYTHONPATH still runs.
func TestStackHookDumpsLiveProcess(t *testing.T) {
	testenv.LookPath(t, "/usr/bin/python3")
	dir := t.TempDir()
	theirs := t.TempDir()
	if err := os.WriteFile(filepath.Join(theirs, "sitecustomize.py"), []byte("import builtins\nbuiltins.THEIRS = 'loaded'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := startHooked(t, dir, theirs, `
import builtins, threading, time
def side():
    threading.Event().wait()
threading.Thread(target=side, daemon=True).start()
def stuck_in_data_loader():
    print("ready", getattr(builtins, "THEIRS", "missing"), flush=True)
    while True:
        time.sleep(0.05)
stuck_in_data_loader()
`)
	pid := cmd.Process.Pid
	for i := range 2 {
		text, err := hookDump(context.Background(), pid, dir, 5*time.Second)
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		if n := strings.Count(text, "(most recent call first)"); n != 2 || !strings.Contains(text, "in stuck_in_data_loader") || !strings.Contains(text, "in side") {
			t.Fatalf("dump %d: want both threads once, stuck_in_data_loader and side, got:\n%s", i, text)
		}
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the process did not survive its dumps: %v", err)
	}
	if out := cmd.Stdout.(*syncBuilder).String(); !strings.Contains(out, "ready loaded") {
		t.Errorf("the hidden sitecustomize did not run: %q", out)
	}
}

// A process whose code replaced the handler (signal.SIG_DFL: SIGUSR2
// would end it) is not signalled, and neither is one without a file of
// its own (another process's file under a reused pid does not count).
func TestStackHookNeverSignalsWithoutHandler(t *testing.T) {
	testenv.LookPath(t, "/usr/bin/python3")
	dir := t.TempDir()
	cmd := startHooked(t, dir, "", `
import signal, time
signal.signal(signal.SIGUSR2, signal.SIG_DFL)
print("ready", flush=True)
time.sleep(60)
`)
	pid := cmd.Process.Pid
	if _, err := hookDump(context.Background(), pid, dir, time.Second); err == nil || !strings.Contains(err.Error(), "does not catch SIGUSR2") {
		t.Fatalf("hookDump = %v, want a refusal naming SIGUSR2", err)
	}
	if _, err := hookDump(context.Background(), pid, t.TempDir(), time.Second); err == nil || !strings.Contains(err.Error(), "hook is not loaded") {
		t.Fatalf("hookDump without a file = %v, want the hook named as not loaded", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the process was ended: %v", err)
	}
}

// syncBuilder is a strings.Builder the command's copier writes while the
// test reads.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A stack file that is a link or a FIFO (planted where a process's file
// would be) is never read.
func TestStackFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.txt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, fifo} {
		if _, err := ownFileSize(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ownFileSize(%s) = %v, want a refusal", p, err)
		}
	}
	if _, err := readFrom(link, 0, 10); err == nil {
		t.Errorf("readFrom followed a link")
	}
}
