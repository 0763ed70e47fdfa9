package sigclean

import (
	"os"
	"os/exec"
	"strings"
)

// envTarget names the program the trampoline executes. It is removed
// from the environment before that program runs.
const envTarget = "DROVER_SIGCLEAN_EXEC"

func init() {
	if path, ok := os.LookupEnv(envTarget); ok {
		trampoline(path)
	}
}

// Command makes c start its program through the trampoline, so that the
// program gets default signal dispositions and an empty signal mask. It
// leaves c as it is where the trampoline is not available (not Linux) or
// where c cannot start anyway (c.Err: its program was not found), so
// that Start reports that error as before. Call it after setting c.Env
// and before Start.
func Command(c *exec.Cmd) {
	if !supported || c.Err != nil || c.Path == "" {
		return
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	c.Env = append(without(env), envTarget+"="+c.Path)
	c.Path = selfExe
}

// without returns env less the trampoline's own variable.
func without(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, envTarget+"=") {
			out = append(out, kv)
		}
	}
	return out
}
