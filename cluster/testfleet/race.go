//go:build race

package testfleet

// raceEnabled: this binary runs under the race detector, so the drover
// binary BuildDrover makes for it is built with it too.
const raceEnabled = true
