//go:build !race

package stage

// linkRate is every fleet host's link in TestFleetStage (see race_test.go).
const linkRate = "400mbit"
