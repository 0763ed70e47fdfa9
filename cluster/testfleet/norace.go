//go:build !race

package testfleet

// raceEnabled: this binary runs without the race detector.
const raceEnabled = false
