package kit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// RunTop runs `drover top ARGS JOB` to its end and returns its stdout.
func RunTop(t *testing.T, j *FleetJob, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(DroverBinary(t), append(append([]string{"top"}, args...), j.Path)...)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(j.Dir, "home"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "drover top: %s", stderr.String())
	return out
}
