// Package sigclean starts processes with the signal state sshd gives the
// processes it starts: every signal at its default disposition and none
// blocked, whatever the starting process inherited. A Go program cannot
// give its children that by itself: os/exec's children keep the signals
// the program inherited as ignored (SIGHUP under nohup, SIGINT in a
// shell's background job) and the signal mask the program started with.
// So Command routes the start through a trampoline, the running binary
// itself (/proc/self/exe), which this package's init recognises by an
// environment variable: it sets every ignored signal back to its default,
// empties the signal mask and executes the real program in place, with
// the same pid, process group, file descriptors and arguments.
//
// Every binary that imports this package (drover, its agent, the test
// binaries) is its own trampoline; nothing else is installed.
package sigclean
