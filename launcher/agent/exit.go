package agent

// drover's exit statuses, the same for `drover` and `drover agent`: the
// README lists them and scripts rely on them, so they are defined once,
// here, in the lowest package whose commands exit with them.
const (
	ExitOK = 0
	// ExitFailed: the command ran and failed (a run, a host, a copy).
	ExitFailed = 1
	// ExitUsage: a usage or configuration error; nothing was started.
	ExitUsage = 2
	// ExitDetached is the status of an attach client that let go of a
	// group still running (its controller went silent or closed the
	// channel).
	ExitDetached = 75
	// ExitInterrupted: stopped by Ctrl-C or a signal (128+SIGINT, as a
	// shell reports it).
	ExitInterrupted = 130
)
