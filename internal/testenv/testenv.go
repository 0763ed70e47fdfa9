// Package testenv decides, in one place, what a test does when this machine
// lacks something it needs (root, sshd, python3 with torch, setsid,
// unshare, slurm, a C compiler): skip with the reason here, fail under
// CI=true. CI installs every need (.ci/run), so a skip there means an
// install step is missing and must not pass silently.
//
// It also holds the one way a test waits for something (Wait, WaitFor): a
// bounded poll that fails naming what it waited for and what it saw last,
// so that no test hand-writes a deadline loop or sleeps in the hope that a
// condition holds by then.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// CI reports whether this is a CI run (CI=true), where no need may be
// missing.
func CI() bool { return os.Getenv("CI") == "true" }

// Need stops t when err says a need is missing: t.Fatal under CI=true,
// t.Skip elsewhere, both naming what and err. A nil err does nothing.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("%s is needed and missing under CI=true (.ci/run must install it): %v", what, err)
		return // a testing.TB whose Fatalf returns must not skip as well
	}
	t.Skipf("needs %s: %v", what, err)
}

// LookPath returns the path of program, or stops t as Need does.
func LookPath(t testing.TB, program string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	Need(t, program, err)
	return p
}

// Root stops t as Need does unless the test runs as root.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "root ("+why+")", errNotRoot)
	}
}

type notRoot struct{}

func (notRoot) Error() string { return "not running as root" }

var errNotRoot error = notRoot{}
