//go:build !race

package fleettest

// raceEnabled: this binary runs without the race detector.
const raceEnabled = false
