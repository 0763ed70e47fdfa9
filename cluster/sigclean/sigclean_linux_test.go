package sigclean_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster/sigclean"
)

// The helper modes of TestCommandCleansInheritedState, which runs this
// test binary as a process with dirty signal state.
const helperEnv = "SIGCLEAN_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "dirty":
		// Become a process that inherited SIGHUP ignored and SIGINT and
		// SIGUSR1 blocked, as one started under nohup by a parent that
		// blocks signals: execve keeps both.
		runtime.LockOSThread()
		signal.Ignore(syscall.SIGHUP)
		var set unix.Sigset_t
		for _, s := range []syscall.Signal{syscall.SIGINT, syscall.SIGUSR1} {
			set.Val[(s-1)/64] |= 1 << ((uint(s) - 1) % 64)
		}
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
			panic(err)
		}
		os.Setenv(helperEnv, "report")
		panic(syscall.Exec("/proc/self/exe", os.Args, os.Environ()))
	case "report":
		os.Unsetenv(helperEnv)
		for _, clean := range []bool{false, true} {
			c := exec.Command("cat", "/proc/self/status")
			if clean {
				sigclean.Command(c)
			}
			out, err := c.Output()
			if err != nil {
				panic(err)
			}
			fmt.Printf("clean=%v %s %s\n", clean, field(out, "SigIgn"), field(out, "SigBlk"))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func field(status []byte, name string) string {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return name + "=" + strings.TrimSpace(v)
		}
	}
	return name + "=?"
}

func has(mask string, sig syscall.Signal) bool {
	v, err := strconv.ParseUint(mask[strings.Index(mask, "=")+1:], 16, 64)
	return err == nil && v&(1<<(uint(sig)-1)) != 0
}

// A process that inherited an ignored SIGHUP and blocked signals passes
// both on to what it starts with os/exec; through Command, what it starts
// has SIGHUP at its default and nothing blocked.
func TestCommandCleansInheritedState(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	c := exec.Command(self, "-test.run=^$")
	c.Env = append(os.Environ(), helperEnv+"=dirty")
	out, err := c.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "%s", out)
	plain, clean := strings.Fields(lines[0]), strings.Fields(lines[1])
	// Without the trampoline the dirt is passed on: the test can fail.
	assert.True(t, has(plain[1], syscall.SIGHUP), "os/exec's child: %s", lines[0])
	assert.True(t, has(plain[2], syscall.SIGUSR1), "os/exec's child: %s", lines[0])
	assert.Equal(t, []string{"clean=true", "SigIgn=0000000000000000", "SigBlk=0000000000000000"}, clean)
}

// A program the trampoline cannot run fails as a shell says so: 127.
func TestCommandMissingProgram(t *testing.T) {
	c := exec.Command("/bin/true")
	c.Path = "/nonexistent/program"
	sigclean.Command(c)
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 127, ee.ExitCode())
	assert.Contains(t, string(out), "/nonexistent/program")
}
