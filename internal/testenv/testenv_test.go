package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Need skips outside CI and fails under CI=true: checked in a child
// process, since a skip or a failure ends the test that meets it.
func TestNeedSkipsHereFailsUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Need(t, "a thing", errors.New("not installed"))
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "needs a thing: not installed"},
		{"true", true, "a thing is needed and missing under CI=true"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeedSkipsHereFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.wantFail || !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: err %v, output:\n%s", tc.ci, err, out)
		}
		if !tc.wantFail && !strings.Contains(string(out), "--- SKIP") {
			t.Errorf("CI=%q: not skipped:\n%s", tc.ci, out)
		}
	}
}

func TestNeedNilDoesNothing(t *testing.T) {
	Need(t, "anything", nil)
}
