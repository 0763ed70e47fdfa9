//go:build !unix

package cluster

// OpenFileLimit is 0 where there is no RLIMIT_NOFILE to read.
func OpenFileLimit() uint64 { return 0 }
