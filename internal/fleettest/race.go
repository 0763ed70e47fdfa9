//go:build race

package fleettest

// raceEnabled: this binary runs under the race detector, so the drover
// binary BuildDrover makes for it is built with it too.
const raceEnabled = true
