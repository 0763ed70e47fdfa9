//go:build race

package stage

// linkRate is every fleet host's link in TestFleetStage. Under the race
// detector the agents (built with it too, fleettest.BuildDrover) hash
// several times slower, and four of them on the test machine's 2 shared
// cores would set the time rather than the links: a slower link keeps
// the measurement one of the chain, as on hosts with CPUs of their own.
const linkRate = "100mbit"
