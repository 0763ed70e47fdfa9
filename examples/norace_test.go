//go:build !race

package examples_test

// raceEnabled: this test binary runs without the race detector.
const raceEnabled = false
