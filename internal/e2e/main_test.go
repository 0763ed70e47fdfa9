package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/launcher/agent"
)

// fleet is the package's test fleet: four SSH hosts on 10.231.27.0/24 (moved by DROVER_TESTFLEET_SLOT),
// brought up at the first fleettest.Need.
var fleet *fleettest.Fleet

// binDir holds the drover binary that fleet tests build once (see
// droverBinary); TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "drover-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "create binary directory: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return fleettest.Main(m, fleettest.Options{Name: "ee", N: 4, Subnet: 27}, &fleet)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// droverBinary builds the real drover binary once per test run and returns
// its path. It is both the controller the tests run and the agent drover
// installs on every host, so fleet tests exercise real processes and real
// signals end to end. A -race test run builds a -race binary, so that races
// in the controller and the agent fail the tests too (see assertNoRace).
func droverBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = fleettest.BuildDrover(binDir) })
	if binErr != nil {
		t.Fatalf("build drover: %v", binErr)
	}
	return binPath
}

// drover's exit statuses, as the README lists them and scripts rely on
// (agent.Exit*): the scenarios check the binary's, as a script sees them.
const (
	exitFailed      = agent.ExitFailed
	exitConfig      = agent.ExitUsage
	exitInterrupted = agent.ExitInterrupted
)
