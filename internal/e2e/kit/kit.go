// Package kit is what drover's end-to-end fleet scenarios share: a
// package's fleet, the drover binary built once per test binary, job
// files written for one test, a `drover` controller run from outside (its
// output, exit status and signals), the job's processes found on the
// hosts by their environment, and stand-in GPUs. The scenarios live in
// internal/e2e and its sub-packages, one fleet per package so that CI
// runs them side by side; each package's TestMain calls Main.
package kit

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/launcher/agent"
)

// drover's exit statuses, as the README lists them and scripts rely on
// (agent.Exit*): the scenarios check the binary's, as a script sees them.
const (
	ExitFailed      = agent.ExitFailed
	ExitConfig      = agent.ExitUsage
	ExitInterrupted = agent.ExitInterrupted
)

// fleet is the calling test binary's fleet (Main sets it): one per test
// binary, as a package's tests share one.
var fleet *fleettest.Fleet

// binDir holds the drover binary built once per test binary (see
// DroverBinary); Main removes it.
var binDir string

// Main runs a scenario package's tests (its TestMain's body) on a fleet
// brought up at the first fleettest.Need, stored in *f for the package's
// tests and kept here for the helpers, and removes the binary built for
// them at the end.
func Main(m *testing.M, opts fleettest.Options, f **fleettest.Fleet) int {
	dir, err := os.MkdirTemp("", "drover-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "create binary directory: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return fleettest.Main(m, opts, f, &fleet)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// DroverBinary builds the real drover binary once per test run and returns
// its path. It is both the controller the tests run and the agent drover
// installs on every host, so fleet tests exercise real processes and real
// signals end to end. A -race test run builds a -race binary, so that races
// in the controller and the agent fail the tests too (see AssertNoRace).
func DroverBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = fleettest.BuildDrover(binDir) })
	if binErr != nil {
		t.Fatalf("build drover: %v", binErr)
	}
	return binPath
}
