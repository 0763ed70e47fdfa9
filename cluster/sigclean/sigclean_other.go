//go:build !linux

package sigclean

// Elsewhere there is no /proc/self/exe to run as the trampoline: Command
// leaves the command as it is.
const (
	supported = false
	selfExe   = ""
)

func trampoline(string) {}
