package kit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/require"
)

// FakeGPUs gives fleet host i two GPUs through a stand-in nvidia-smi (and
// dmesg) first on its login PATH: a directory bind-mounted over
// /usr/local/bin in the mount namespace of the host's logins only. The
// stand-in answers in the forms a real H200 under driver 580 printed
// (gpu/testdata/h200): "[N/A]" for page retirement, "No" for the remap
// states, a hex bitmask for the clock event reasons. The returned
// directory holds the host's state, which the test changes as root:
// ecc0/ecc1 (volatile uncorrectable ECC count per GPU) and kmsg (what
// dmesg prints). The test hosts have no NVML, so the agent falls back to
// nvidia-smi, and their login user may not read /dev/kmsg
// (kernel.dmesg_restrict), so it falls back to dmesg.
func FakeGPUs(t *testing.T, i int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drover-fake-gpus-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	smi := fmt.Sprintf(`#!/bin/sh
d=%q
ecc() { cat "$d/ecc$1" 2>/dev/null || echo 0; }
case "$1" in
--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,pci.bus_id,driver_version)
	echo "0, GPU-h%[2]d-0, NVIDIA H200, 143771, 0, 0, 00000000:18:00.0, 580.159.04"
	echo "1, GPU-h%[2]d-1, NVIDIA H200, 143771, 0, 0, 00000000:19:00.0, 580.159.04" ;;
--query-gpu=%[3]s)
	echo "0, $(ecc 0), 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16"
	echo "1, $(ecc 1), 0, [N/A], No, No, 0x0000000000000000, 5, 5, 16, 16" ;;
--query-gpu=index,mig.mode.current) printf '0, [N/A]\n1, [N/A]\n' ;;
--query-compute-apps=*) ;;
"") echo "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |" ;;
*) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
`, dir, i, gpu.SMIHealthFields)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(smi), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dmesg"), []byte(fmt.Sprintf("#!/bin/sh\ncat %q/kmsg 2>/dev/null\n", dir)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kmsg"), []byte("<5>[    1.0] Linux version 6.8.0\n"), 0o644))
	_, err = fleet.ExecInLogins(i, "mount", "--bind", dir, "/usr/local/bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := fleet.ExecInLogins(i, "umount", "/usr/local/bin"); err != nil {
			t.Errorf("restore %s: %v", fleet.Hosts[i].Name, err)
		}
	})
	PrivateGPULeases(t, i)
	return dir
}

// WaitStderr waits until drover's events match re.
func (d *DroverProc) WaitStderr(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	testenv.Wait(t, within, "an event matching "+re.String(), func() (bool, string) {
		if m = re.FindStringSubmatch(d.Stderr.String()); m != nil {
			return true, ""
		}
		select {
		case <-d.Done:
			t.Fatalf("drover exited %d before an event matching %s\nstderr:\n%s", d.Code, re, d.Stderr.String())
		default:
		}
		return false, "\nstderr:\n" + d.Stderr.String()
	})
	return m
}
