package sharing

import (
	"os"
	"testing"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
)

// fleet is the package's test fleet: four SSH hosts on 10.231.20.0/24
// (moved by DROVER_TESTFLEET_SLOT), brought up at the first fleettest.Need.
var fleet *fleettest.Fleet

func TestMain(m *testing.M) {
	os.Exit(kit.Main(m, fleettest.Options{Name: "es", N: 4, Subnet: 20}, &fleet))
}
