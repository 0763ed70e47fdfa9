package agent

// ProcState is where one process of a run stands, as its agent records it
// in a State record (the --state file) and `drover status` shows it. It is
// defined here, beside the record, so that every reader compares against
// the same constants and the JSON keeps the plain strings below.
type ProcState string

// Process states in a State record.
const (
	ProcStarting ProcState = "starting"
	ProcRunning  ProcState = "running"
	ProcExited   ProcState = "exited"
	ProcStopped  ProcState = "stopped"
	// ProcFailed: the command could not be started.
	ProcFailed ProcState = "failed"
)

// Final reports whether a process in s will not change state any more.
func (s ProcState) Final() bool {
	return s == ProcExited || s == ProcStopped || s == ProcFailed
}

// RunState is where a whole run stands, as its supervising drover records
// it in the RunRecord and `drover status` and `drover ps` show it.
type RunState string

// Run states in a RunRecord, in the order a run goes through them.
const (
	// RunQueued: a --queue run waiting in its hosts' GPU queues
	// (RunRecord.Queue says where); nothing of it runs yet.
	RunQueued     RunState = "queued"
	RunStarting   RunState = "starting"
	RunRunning    RunState = "running"
	RunRestarting RunState = "restarting"
	RunSucceeded  RunState = "succeeded"
	RunFailed     RunState = "failed"
	RunStopped    RunState = "stopped"
	// RunUnsupervised is never recorded: the views say it of a run whose
	// record is not final but whose supervisor is gone.
	RunUnsupervised RunState = "unsupervised"
	// RunLost is never recorded either: the views say it of a foreground
	// run whose record is not final but whose supervisor is gone (killed,
	// or its machine lost). Its agents stop its group on their own, so it
	// is over, though no one recorded how.
	RunLost RunState = "lost"
)

// Final reports whether a run in s is over.
func (s RunState) Final() bool {
	return s == RunSucceeded || s == RunFailed || s == RunStopped
}
