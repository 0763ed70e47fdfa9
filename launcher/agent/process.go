package agent

// ProcessStart is pid's start time on this machine, in clock ticks after
// boot (/proc/PID/stat's field 22; 0 when unknown, as without /proc):
// recorded with a pid, it names that process for good.
func ProcessStart(pid int) uint64 { return startTicks(pid) }

// ProcessAlive reports whether process pid runs on this machine (a zombie
// does not) and, when start is not 0, is the process that started then:
// a later process that got the same pid is not.
func ProcessAlive(pid int, start uint64) bool { return pid > 0 && liveProcess(pid, start) }
