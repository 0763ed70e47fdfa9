package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRoot writes files (path relative to the root: content) under a new
// root directory.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, text := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(text), 0o644))
	}
	return root
}

// Where logind would kill the supervisor at logout and no scope can be
// had (a fake root: systemd-run is never tried there), run -d refuses and
// names loginctl enable-linger; lingering, another setting, a drop-in
// that turns it off again, or no systemd at all need nothing.
func TestLogindGuard(t *testing.T) {
	const booted = "run/systemd/system/.keep"
	for _, tc := range []struct {
		name   string
		files  map[string]string
		refuse bool
	}{
		{"no systemd", map[string]string{"etc/systemd/logind.conf": "[Login]\nKillUserProcesses=yes\n"}, false},
		{"default", map[string]string{booted: "", "etc/systemd/logind.conf": "[Login]\n#KillUserProcesses=no\n"}, false},
		{"kills", map[string]string{booted: "", "etc/systemd/logind.conf": "[Login]\nKillUserProcesses=yes\n"}, true},
		{"kills, lingering", map[string]string{booted: "", "etc/systemd/logind.conf": "[Login]\nKillUserProcesses=yes\n", "var/lib/systemd/linger/ann": ""}, false},
		{"drop-in turns it on", map[string]string{booted: "", "etc/systemd/logind.conf.d/10-kill.conf": "[Login]\nKillUserProcesses=yes\n"}, true},
		{"later drop-in turns it off", map[string]string{booted: "", "etc/systemd/logind.conf.d/10-kill.conf": "KillUserProcesses=yes\n",
			"usr/lib/systemd/logind.conf.d/20-keep.conf": "KillUserProcesses=no\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrap, err := LogindGuard(fakeRoot(t, tc.files), "ann")
			assert.Nil(t, wrap)
			if tc.refuse {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "loginctl enable-linger ann")
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
