//go:build race

package examples_test

// raceEnabled: this test binary runs under the race detector, so the drover
// binary the tests start is built with it too.
const raceEnabled = true
