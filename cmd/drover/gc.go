package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
)

// startingHeapSize is the heap drover grows to before its first garbage
// collection.
const startingHeapSize = 32 << 20

// startingHeap lets the heap reach size before the first collection, then
// hands the pace back to the default (GOGC=100). Most drover commands are
// short (push, exec, plan) and allocate a few megabytes, where the
// default's 4 MB starting goal meant two or three collections: about 8%
// of drover's CPU in a push that changes one file. The Go compiler does
// the same (cmd/compile's AdjustStartingHeap). GOGC or GOMEMLIMIT in the
// environment leave the runtime's settings alone.
func startingHeap(size int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(size)
	// The first collection frees the sentinel and runs the cleanup.
	sentinel := new([64]byte) // not a tiny allocation, which may never be freed alone
	runtime.AddCleanup(sentinel, func(struct{}) {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	}, struct{}{})
}
